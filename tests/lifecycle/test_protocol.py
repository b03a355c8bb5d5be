"""Lifecycle derivations: phases from t-points, missing points, engine events, the cost fit."""

from __future__ import annotations

import math

import pytest

from agentic_kvc.lifecycle import protocol
from agentic_kvc.lifecycle.runner import Grid, events_for_engine


def _ts(step_ns: int = 1_000_000) -> dict[str, int]:
    return {p: 10**9 + i * step_ns * (i + 1) for i, p in enumerate(protocol.POINTS)}


def test_phases_sum_to_e2e_when_every_point_is_observed() -> None:
    ts = _ts()
    bd = protocol.breakdown(ts)
    phases = [bd[p] for p in protocol.PHASE_ORDER]
    assert math.isclose(sum(phases), bd["e2e"])
    assert bd["residual_frac"] == 0
    assert bd["unobserved"] == []
    assert protocol.breakdown_complete(bd)
    assert bd["transfer_total"] == (ts["t7"] - ts["t3"]) / 1e6
    assert bd["ttft"] == (ts["t9"] - ts["t0"]) / 1e6


def test_a_missing_point_merges_its_phases_and_is_named() -> None:
    ts: dict[str, int | None] = dict(_ts())
    ts["t5"] = None
    bd = protocol.breakdown(ts)
    assert "handshake+transfer" in bd and "handshake" not in bd and "transfer" not in bd
    assert bd["unobserved"] == ["t5"]
    assert not protocol.breakdown_complete(bd)  # sums, but a point is missing
    assert math.isclose(bd["phase_sum"], bd["e2e"])


def test_out_of_order_points_are_flagged() -> None:
    ts = _ts()
    ts["t6"], ts["t7"] = ts["t7"], ts["t6"]
    bd = protocol.breakdown(ts)
    assert bd["negative_phases"] == ["transfer_signal"]


def test_engine_points_take_first_events_and_transfer_detail() -> None:
    p = [
        {"ev": "seen", "t_ns": 1, "req": "x-p"},
        {"ev": "scheduled", "t_ns": 2, "req": "x-p", "tokens": 256},
        {"ev": "finished", "t_ns": 3, "req": "x-p", "prompt_tokens": 768},
    ]
    d = [
        {"ev": "seen", "t_ns": 4, "local_hit_tokens": 512, "external_tokens": 256},
        {"ev": "load_start", "t_ns": 5, "local_blocks": 8, "remote_blocks": 24},
        {"ev": "read_posted", "t_ns": 7, "call_t_ns": 5},
        {"ev": "read_done", "t_ns": 8, "bytes": 262144, "ops": 1, "nixl_xfer_us": 500.0},
        {"ev": "recv_done", "t_ns": 9},
        {"ev": "scheduled", "t_ns": 10},
        {"ev": "scheduled", "t_ns": 11},
    ]
    ts, detail = protocol.engine_points(p, d)
    assert ts == {"t2": 2, "t3": 3, "t4": 4, "t5": 5, "t6": 8, "t7": 9, "t8": 10}
    assert detail["bytes"] == 262144 and detail["blocks"] == 8
    assert detail["d_local_hit_tokens"] == 512
    td = protocol.transfer_detail(detail, 2, {"transfer": 2.0})
    assert td["effective_bw_gbps"] == pytest.approx(262144 * 8 / 2e6)
    assert td["nixl_xfer_ms"] == 0.5


def test_request_tags_do_not_match_each_other() -> None:
    evs = [
        {"ev": "seen", "req": "cmpl-lc-1-p-0"},
        {"ev": "seen", "req": "cmpl-lc-1-pd-0"},
        {"ev": "seen", "req": "cmpl-lc-1-colo-0-abc"},
    ]
    assert [e["req"] for e in events_for_engine(evs, "lc-1-p")] == ["cmpl-lc-1-p-0"]
    assert [e["req"] for e in events_for_engine(evs, "lc-1-colo")] == ["cmpl-lc-1-colo-0-abc"]


def test_linear_fit_recovers_a_line_and_r2() -> None:
    xs = [1e5, 2e5, 4e5, 8e5]
    fit = protocol.linear_fit(xs, [3 + 2e-5 * x for x in xs])
    assert fit.alpha == pytest.approx(3) and fit.beta == pytest.approx(2e-5)
    assert fit.r2 == pytest.approx(1.0)
    noisy = protocol.linear_fit(xs, [1, 9, 2, 8])
    assert noisy.r2 < 0.5
    with pytest.raises(ValueError, match="two distinct"):
        protocol.linear_fit([1, 1], [2, 3])


def test_grid_cells_respect_the_model_length() -> None:
    g = Grid("t", [0, 2048], [1024, 2048], [1, 128], max_model_len=4096)
    cells = list(g.cells())
    assert (2048, 2048, 1) not in cells and (2048, 1024, 128) in cells
    assert len(cells) == 6
