"""A subagent DAG (tests/data/agentic_dag.jsonl) replayed through the proxy on real vLLM.

Children are sent only after the turn that spawns them finished; siblings run side by side; the
join turn waits for every subagent; subagent requests carry their parent session to the proxy.
One engine and seven short requests: 28 and 34 s measured on the shared 2-core machine,
within CI's allowance for real-engine tests, so not marked slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.serve.run_backend import run_vllm

pytestmark = pytest.mark.vllm
DAG = Path(__file__).resolve().parents[1] / "data" / "agentic_dag.jsonl"


def test_subagents_start_after_their_dependencies_on_real_vllm(
    tiny_model, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AKVC_TINY_MODEL", str(tiny_model))
    config = load_config(
        {
            "backend": "vllm",
            "workload": {"trace": str(DAG), "mode": "closed"},
            "fleet": {"instances": 1, "model": "tiny", "hardware": "cpu-tiny", "block_size": 32},
            "policy": {"name": "round_robin"},
            "replay": {"request_timeout_s": 120},
        }
    )
    result = run_vllm(config, tmp_path)
    rec = {r["request_id"]: r for r in result.records}
    assert set(rec) == {"m0", "solo0", "a0", "b0", "a1", "solo1", "m1"}
    assert all(r["error"] is None for r in rec.values()), [r["error"] for r in rec.values()]
    for child in ("a0", "b0"):
        assert rec[child]["t_proxy_recv"] >= rec["m0"]["t_done"]
        assert rec[child]["parent_session_id"] == "main"  # the proxy read x-parent-session-id
    assert rec["a1"]["t_proxy_recv"] >= rec["a0"]["t_done"] + 0.2
    assert rec["m1"]["t_proxy_recv"] >= max(rec["a1"]["t_done"], rec["b0"]["t_done"]) + 0.4
    # the two subagents were in flight together
    a0, b0 = rec["a0"], rec["b0"]
    assert a0["t_proxy_recv"] < b0["t_done"] and b0["t_proxy_recv"] < a0["t_done"]
    assert rec["m1"]["session_source"] == "header:x-session-id"
