"""`akvc workload synth | stats | convert` end to end (in-process, CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.workload import read_workload
from agentic_kvc.workload.transform import jitter_offset


def test_synth_stats_convert(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "w.jsonl"
    res = runner.invoke(
        main,
        [
            "workload",
            "synth",
            "--sessions",
            "30",
            "--seed",
            "5",
            "-o",
            str(out),
            "--param",
            "continue_prob=0.6",
        ],
    )
    assert res.exit_code == 0, res.output
    wl = read_workload(out)
    assert len(wl.sessions) == 30 and wl.meta["generator"]["params"]["continue_prob"] == 0.6
    res = runner.invoke(main, ["workload", "stats", str(out), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output)
    assert stats["requests"] == len(wl) and stats["sessions"] == 30
    res = runner.invoke(main, ["workload", "stats", str(out)])
    assert res.exit_code == 0 and "HEAVY" in res.output
    conv = tmp_path / "c.jsonl"
    res = runner.invoke(
        main,
        [
            "workload",
            "convert",
            str(out),
            "-o",
            str(conv),
            "--max-sessions",
            "4",
            "--token-scale",
            "0.1",
        ],
    )
    assert res.exit_code == 0, res.output
    small = read_workload(conv)
    assert len(small.sessions) == 4 and small.meta["transforms"]["token_scale"] == 0.1


def test_errors_are_one_line_with_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n{x\n')
    res = CliRunner().invoke(main, ["workload", "stats", str(bad)])
    assert res.exit_code == 2 and f"{bad}:2:" in res.output
    res = CliRunner().invoke(
        main, ["workload", "synth", "-o", str(tmp_path / "o"), "--param", "nope=1"]
    )
    assert res.exit_code == 2 and "params.nope" in res.output


def test_convert_refuses_to_write_over_its_input(tmp_path: Path) -> None:
    src = tmp_path / "w.jsonl"
    res = CliRunner().invoke(main, ["workload", "synth", "--sessions", "3", "-o", str(src)])
    assert res.exit_code == 0, res.output
    before = src.read_bytes()
    for target in (src, tmp_path / "." / "w.jsonl"):  # the same file by another spelling
        res = CliRunner().invoke(
            main, ["workload", "convert", str(src), "-o", str(target), "--max-sessions", "1"]
        )
        assert res.exit_code == 2 and "is the input FILE" in res.output
        assert src.read_bytes() == before


def test_help_explains_every_command() -> None:
    for cmd in ([], ["synth"], ["stats"], ["convert"]):
        res = CliRunner().invoke(main, ["workload", *cmd, "--help"])
        assert res.exit_code == 0 and len(res.output) > 200


def test_stats_of_the_default_preset_show_the_agentic_shares(tmp_path: Path) -> None:
    """`synth` with defaults then `stats`: the issue's cold / high-hit / HEAVY shares."""
    runner = CliRunner()
    out = tmp_path / "ac.jsonl"
    res = runner.invoke(main, ["workload", "synth", "--sessions", "2000", "-o", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads(runner.invoke(main, ["workload", "stats", "--json", str(out)]).output)
    assert abs(s["first_turn_share"] - 0.55) < 0.03
    assert abs(s["first_turn_new_tokens_mean"] - 17_700) < 1_000
    assert abs(s["high_hit_share"] - 0.22) < 0.03
    assert abs(s["high_hit_new_tokens_mean"] - 1_300) < 200
    assert abs(s["heavy_first_turn_share"] - 0.92) < 0.04
    table = runner.invoke(main, ["workload", "stats", str(out)]).output
    assert f"{100 * s['first_turn_share']:.1f}%" in table
    assert f"{100 * s['heavy_first_turn_share']:.1f}%" in table


def test_convert_window_and_overflow(tmp_path: Path) -> None:
    runner = CliRunner()
    src = tmp_path / "w.jsonl"
    assert (
        runner.invoke(main, ["workload", "synth", "--sessions", "40", "-o", str(src)]).exit_code
        == 0
    )
    wl = read_workload(src)
    mid = sorted(r.arrival_s for r in wl.requests())[len(wl) // 2]
    out = tmp_path / "win.jsonl"
    args = ["workload", "convert", str(src), "-o", str(out), "--window", "0", str(mid)]
    res = runner.invoke(main, [*args, "--max-input-tokens", "5000", "--overflow", "truncate"])
    assert res.exit_code == 0, res.output
    got = read_workload(out)
    want = [r for r in wl.requests() if r.arrival_s < mid]
    assert len(got) == len(want) > 0
    assert max(r.input_tokens for r in got.requests()) == 5000  # long prompts were cut
    assert got.meta["transforms"]["window_s"] == [0.0, mid]
    res = runner.invoke(
        main, ["workload", "convert", str(src), "-o", str(out), "--window", "5", "1"]
    )
    assert res.exit_code == 2 and "window_s" in res.output


def _starts(path: Path) -> dict[str, float]:
    return {s.session_id: s.start_s for s in read_workload(path).sessions}


def test_session_jitter_shifts_each_session_by_its_seeded_offset(tmp_path: Path) -> None:
    """`--session-jitter J --seed S` (convert and synth): every session starts later by
    jitter_offset(S, session, J), in [0, J); same seed, same file; a negative J is refused."""
    runner = CliRunner()
    src = tmp_path / "w.jsonl"
    assert (
        runner.invoke(main, ["workload", "synth", "--sessions", "12", "-o", str(src)]).exit_code
        == 0
    )
    plain = _starts(src)
    j = 3.0

    def convert(seed: int, name: str) -> Path:
        out = tmp_path / name
        args = ["workload", "convert", str(src), "-o", str(out), "--session-jitter", str(j)]
        res = runner.invoke(main, [*args, "--seed", str(seed)])
        assert res.exit_code == 0, res.output
        return out

    a, again, b = convert(1, "a.jsonl"), convert(1, "again.jsonl"), convert(2, "b.jsonl")
    assert a.read_bytes() == again.read_bytes()
    for out, seed in ((a, 1), (b, 2)):
        got = _starts(out)
        assert got.keys() == plain.keys()
        for sid, t in got.items():
            dt = t - plain[sid]
            assert 0 <= dt < j and dt == pytest.approx(jitter_offset(seed, sid, j))
        assert len({round(t - plain[s], 9) for s, t in got.items()}) > 1  # not one shift for all
        assert read_workload(out).meta["transforms"]["session_jitter_s"] == {
            "jitter_s": j,
            "seed": seed,
        }
    assert _starts(a) != _starts(b)
    # synth: the same offsets on the generated sessions of the same seed.
    jit = tmp_path / "synth_jit.jsonl"
    args = ["workload", "synth", "--sessions", "12", "--session-jitter", str(j), "-o", str(jit)]
    assert runner.invoke(main, args).exit_code == 0
    assert all(
        t - plain[sid] == pytest.approx(jitter_offset(0, sid, j)) for sid, t in _starts(jit).items()
    )
    for cmd in (["convert", str(src)], ["synth"]):
        res = runner.invoke(
            main, ["workload", *cmd, "-o", str(tmp_path / "x"), "--session-jitter", "-0.5"]
        )
        assert res.exit_code == 2 and "--session-jitter" in res.output and "x>=0" in res.output
        assert not (tmp_path / "x").exists()
