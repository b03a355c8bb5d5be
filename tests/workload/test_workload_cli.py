"""`akvc workload synth | stats | convert` end to end (in-process, CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.workload import read_workload


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


def test_help_explains_every_command() -> None:
    for cmd in ([], ["synth"], ["stats"], ["convert"]):
        res = CliRunner().invoke(main, ["workload", *cmd, "--help"])
        assert res.exit_code == 0 and len(res.output) > 200
