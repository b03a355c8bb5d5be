"""The lifecycle section from hand-made records: criteria, fit, incremental check, overhead."""

from __future__ import annotations

import json
from pathlib import Path

from agentic_kvc.analysis.studies import lifecycle
from agentic_kvc.lifecycle import protocol


def _record(c: int, n: int, rep: int, transfer_ms: float, bytes_: int, colo_ttft: float) -> dict:
    step = {"t0": 0, "t1": 1, "t2": 2, "t3": 10, "tp": 11, "t4": 12, "t5": 13}
    ts = {k: v * 1_000_000 for k, v in step.items()}
    ts["t6"] = ts["t5"] + int(transfer_ms * 1e6)
    for i, k in enumerate(("t7", "t8", "t9", "t10")):
        ts[k] = ts["t6"] + (i + 1) * 1_000_000
    bd = protocol.breakdown(ts)
    bd["ttft_overhead_vs_colo"] = bd["ttft"] - colo_ttft
    detail = {"bytes": bytes_, "blocks": bytes_ // 32768, "d_local_hit_tokens": c}
    return {
        "config": {
            "prior_context": c,
            "current_new_tokens": n,
            "output_length": 1,
            "rep": rep,
            "block_size": 32,
        },
        "timestamps_ns": ts,
        "breakdown_ms": bd,
        "transfer_detail": protocol.transfer_detail(detail, 2, bd),
        "colocated": {"breakdown_ms": {"ttft": colo_ttft}},
    }


def test_section_reports_fit_incremental_bytes_and_break_even(tmp_path: Path) -> None:
    recs = []
    for c in (0, 512):
        for rep in range(3):
            # small N: split slower than colocated; large N: faster (a break-even exists)
            recs.append(_record(c, 256, rep, 2.0 + 0.01 * rep, 262144, colo_ttft=5.0))
            recs.append(_record(c, 2048, rep, 9.0 + 0.01 * rep, 2097152, colo_ttft=500.0))
    for r in recs:
        cfg = r["config"]
        name = f"C{cfg['prior_context']}_N{cfg['current_new_tokens']}_O1_rep{cfg['rep']}.json"
        (tmp_path / name).write_text(json.dumps(r))
    (tmp_path / lifecycle.EVENTS_FILE).write_text('{"ev": "layout", "layers": 2}\n')
    s = lifecycle.analyse(tmp_path)
    md = s.markdown()
    assert "| 1 breakdown complete: every point observed, in order, no probe error | met |" in md
    assert "| 4 bytes independent of C | met |" in md
    assert "| 5 clear (N, C) break-even | met |" in md
    fit = lifecycle.fit_transfer(recs)
    assert fit is not None and fit.r2 > 0.99
    assert "| 3 linear transfer model R^2 > 0.95 | met |" in md
    cal = lifecycle.calibration(recs, "here")
    assert cal["source"] == "here" and cal["kv_bytes_per_token"] == 1024
    # No load or probe recorded in these records: the note says so instead of guessing.
    assert "load1 not recorded; no speed probe recorded" in md


def test_section_says_the_machines_load_and_speed(tmp_path: Path) -> None:
    for rep, load1 in enumerate((0.4, 2.6)):
        rec = _record(0, 256, rep, 2.0, 262144, colo_ttft=5.0)
        rec["host"] = {"load1": load1}
        (tmp_path / f"C0_N256_O1_rep{rep}.json").write_text(json.dumps(rec))
    speed = {"python_ms": {"best": 14.7, "median": 15.0}, "memory_ms": {"best": 7.9}}
    (tmp_path / "run.json").write_text(json.dumps({"wall_s": 12.0, "speed_start": speed}))
    md = lifecycle.analyse(tmp_path).markdown()
    assert "load1 0.4-2.6; speed probe 14.7 / 7.9 ms (interpreter / memory)" in md
