"""Lifecycle criterion 1 checks what can go wrong (a point missing, points out of order, a
failed probe), not the residual, which is 0 by construction when every point is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.analysis.studies import lifecycle
from agentic_kvc.lifecycle import protocol

CRITERION = "| 1 breakdown complete: every point observed, in order, no probe error |"


def _write(tmp: Path, ts_edit: dict[str, int | None] | None = None) -> None:
    for n, rep in ((256, 0), (256, 1), (2048, 0), (2048, 1)):
        ts = {p: (i + 1) * 1_000_000 for i, p in enumerate(protocol.POINTS)}
        if ts_edit and rep == 1 and n == 2048:
            ts.update(ts_edit)
        bd = protocol.breakdown(ts)
        bd["ttft_overhead_vs_colo"] = (bd["ttft"] or 0) - 5.0
        rec = {
            "config": {
                "prior_context": 0,
                "current_new_tokens": n,
                "output_length": 1,
                "rep": rep,
                "block_size": 32,
            },
            "timestamps_ns": ts,
            "breakdown_ms": bd,
            "transfer_detail": protocol.transfer_detail(
                {"bytes": n * 1024, "blocks": n // 32, "d_local_hit_tokens": 0}, 2, bd
            ),
            "colocated": {"breakdown_ms": {"ttft": 5.0}},
        }
        (tmp / f"C0_N{n}_O1_rep{rep}.json").write_text(json.dumps(rec))


def _events(tmp: Path, *events: dict) -> None:
    (tmp / lifecycle.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))


def _status(tmp: Path) -> str:
    md = lifecycle.analyse(tmp).markdown()
    line = next(x for x in md.splitlines() if x.startswith(CRITERION))
    return line[len(CRITERION) :].split("|")[0].strip()


def test_clean_records_and_probe_log_meet_criterion_1(tmp_path: Path) -> None:
    _write(tmp_path)
    _events(tmp_path, {"ev": "layout", "layers": 2})
    assert _status(tmp_path) == "met"
    assert lifecycle.analyse(tmp_path).answer.startswith("Every point of every request")


def test_a_probe_error_fails_criterion_1(tmp_path: Path) -> None:
    _write(tmp_path)
    _events(tmp_path, {"ev": "layout"}, {"ev": "probe_error", "probe": "x", "error": "boom"})
    assert lifecycle.probe_errors(tmp_path) == 1
    assert _status(tmp_path) == "not met"
    assert "1 probe error(s)" in lifecycle.analyse(tmp_path).answer


def test_no_probe_log_is_not_evidence(tmp_path: Path) -> None:
    _write(tmp_path)
    assert lifecycle.probe_errors(tmp_path) is None
    assert _status(tmp_path) == "not met"


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"t6": None}, "unobserved points t6"),
        ({"t4": 20_000_000}, "1 record(s) with points out of order"),  # t4 after t5
    ],
)
def test_missing_or_out_of_order_points_fail_criterion_1(
    tmp_path: Path, edit: dict, words: str
) -> None:
    _write(tmp_path, edit)
    _events(tmp_path, {"ev": "layout"})
    assert _status(tmp_path) == "not met"
    assert words in lifecycle.analyse(tmp_path).answer


def test_the_largest_cell_finding_says_when_it_is_within_the_spread(tmp_path: Path) -> None:
    _write(tmp_path)
    _events(tmp_path, {"ev": "layout"})
    line = next(f for f in lifecycle.analyse(tmp_path).findings if "PD - colocated" in f)
    # Identical repetitions: no spread, a difference beyond it.
    assert "within the repeats' spread" not in line
    cell = [json.loads(p.read_text()) for p in tmp_path.glob("C0_N2048_O1_rep*.json")]
    assert lifecycle.repeat_spread(cell) == 0.0
