"""The tiers study's real-engine part (`tiers_real`) on synthetic records: HBM only against a
host tier on two "real" fleets, three repeats, with the simulator's twin beside them.

The records are made here so the truth is known: with the tier every request's TTFT is half
its HBM-only value, the engines' counters grow by a set number of host tokens, and the view
expected a set number; the section must say so, pair by repeat, and apply the spread rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from agentic_kvc.analysis.experiments import Plan, expand
from agentic_kvc.analysis.studies.base import load_study
from agentic_kvc.analysis.studies.common import beyond_spread
from agentic_kvc.analysis.studies.common import repeat_spread as spread
from agentic_kvc.analysis.studies.tiers import analyse
from agentic_kvc.analysis.studies.tiers_real import (
    HBM_ONLY,
    back_to_back,
    engine_host_tokens,
    interleaved,
    tier_label,
)
from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json

BASE = {
    "backend": "vllm",
    "workload": {"generator": {"preset": "agentic-coding", "sessions": 4}, "token_scale": 0.1},
    "fleet": {
        "instances": 2,
        "model": "tiny",
        "hardware": "cpu-tiny",
        "block_size": 32,
        "kv_cache_tokens": 4128,
    },
    "policy": {"name": "sglang_cache_aware", "cache_view": "exact"},
}
ROUTERS = [
    {"name": "sglang_cache_aware", "cache_view": "exact"},
    {"name": "predicted_ttft", "cache_view": "exact", "params": {"hardware": "cpu-tiny"}},
]
VARIANT = "real, small KV"
N_REQ = 40
HOST_TOKENS_PER_INSTANCE = 1000.0  # what each engine's host counter grows by in a host run
PREDICTED_HOST = 50  # per request, what the view expected from the host tier


def _experiments() -> list[dict[str, Any]]:
    cell = {"study": "tiers", "variant": VARIANT, "base": "base.yaml"}
    return [
        {**cell, "name": "tiers_real_hbm", "matrix": {"repeat": [0, 1, 2], "policy": ROUTERS}},
        {
            **cell,
            "name": "tiers_real_host",
            "set": {"fleet.kv_tiers.host_gib": 0.0625},
            "matrix": {"repeat": [0, 1, 2], "policy": ROUTERS},
        },
        {
            **cell,
            "name": "tiers_real_hbm_twin",
            "set": {"backend": "sim"},
            "matrix": {"policy": ROUTERS},
        },
        {
            **cell,
            "name": "tiers_real_host_twin",
            "set": {"backend": "sim", "fleet.kv_tiers.host_gib": 0.0625},
            "matrix": {"policy": ROUTERS},
        },
    ]


def _ttft(i: int, repeat: int, host: bool, router: str) -> float:
    """HBM only: 100-139 ms times a repeat effect (1.0, 1.1, 1.2) shared by both tiers; the
    tier halves it.
    predicted_ttft is 10% below the tier-blind router everywhere."""
    base = (0.100 + 0.001 * i) * (1.0 + 0.1 * repeat)
    return base * (0.5 if host else 1.0) * (0.9 if router == "predicted_ttft" else 1.0)


def _write_run(results: Path, root: Path, planned: Any) -> None:
    cfg = load_config(root / planned.base, list(planned.overrides))
    host = cfg.fleet.kv_tiers.host_gib > 0
    real = cfg.backend != "sim"
    repeat = int(planned.labels.get("repeat", 0))
    d = results / "runs" / planned.run_id
    d.mkdir(parents=True)
    canonical = cfg.model_dump(mode="json")
    (d / "config.json").write_text(json.dumps(canonical))
    load1 = 1.0 + repeat
    # Real runs interleaved: in repeat k's minute each router's HBM-only run, then its + host run
    # (seconds 0 and 10 for the first router, 20 and 30 for the second).
    minute = 10 + repeat
    second = 20 * (cfg.policy.name != "sglang_cache_aware") + 10 * host
    manifest = {
        "complete": True,
        "started_at": f"2026-11-30T05:{minute:02d}:{second:02d}+0000",
        "finished_at": f"2026-11-30T05:{minute:02d}:{second + 9:02d}+0000",
        "run_id": planned.run_id,
        "backend": cfg.backend,
        "config": canonical,
        "backend_info": {
            "host_load": {"run": {"load1": {"mean": load1}, "overall": {"steal": 0.0}}}
        }
        if real
        else {},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "summary.json").write_text("{}")
    rows = []
    for i in range(N_REQ):
        t = _ttft(i, repeat, host, cfg.policy.name) * (1.2 if not real else 1.0)
        row = {
            "request_id": f"r{i}",
            "session_id": f"s{i % 8}",
            "turn": i // 8,
            "arrival_s": float(i),
            "input_tokens": 1000,
            "output_tokens": 10,
            "cached_tokens": 600 if host else 300,
            "policy": cfg.policy.name,
            "route_class": "COLOCATED",
            "prefill_instance": i % 2,
            "decode_instance": i % 2,
            "t_proxy_recv": float(i),
            "t_first_token": float(i) + t,
            "t_done": float(i) + t + 0.1,
            "ttft_s": t,
            "e2e_s": t + 0.1,
            "error": None,
        }
        if real and host:
            row["predicted_host_tokens"] = PREDICTED_HOST
        if not real and host:
            row["host_tokens"] = 250
        rows.append(row)
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = []
    for inst in range(2):
        for k, t in enumerate((0.0, 5.0, 10.0)):
            s: dict[str, Any] = {"t": t, "instance": inst, "healthy": True}
            # The engines are shared by the repeats: their counters carry the earlier runs'
            # tokens; on repeat 0 (fresh engines) the counter is absent until it grows.
            value = 5000.0 * repeat + HOST_TOKENS_PER_INSTANCE * k / 2
            if real and host and value > 0:
                s["host_cached_tokens"] = value
            samples.append(s)
    (d / "instances.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("tiers_real")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    plan: Plan = expand(_experiments(), root)
    results = root / "results"
    for planned in plan.runs:
        _write_run(results, root, planned)
    atomic_write_json(results / "work" / "plan.json", plan.to_json())
    data = load_study("tiers", results, None, results / "work" / "plan.json")
    return analyse(data, root / "figures", root), data


def _row(s: Any, start: str) -> list[str]:
    line = next(x for x in "\n".join(s.blocks).splitlines() if x.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def test_tier_label() -> None:
    assert tier_label(0) == HBM_ONLY
    assert tier_label(0.0625) == "host 64 MiB"
    assert tier_label(16) == "host 16 GiB"


def test_interleaved_means_every_settings_span_overlaps_the_others() -> None:
    def at(m: int) -> tuple[str, str]:
        return (f"2026-11-30T05:{m:02d}:00+0000", f"2026-11-30T05:{m:02d}:30+0000")

    # One setting after the other (the quiet campaign's order): not interleaved.
    assert not interleaved({"HBM only": [at(1), at(2)], "host 64 MiB": [at(3), at(4)]})
    assert interleaved({"HBM only": [at(1), at(3)], "host 64 MiB": [at(2), at(4)]})
    assert not interleaved({"HBM only": [at(1), at(3)]})  # one setting: nothing to interleave
    assert not interleaved({})


def test_back_to_back_means_each_pairs_runs_are_consecutive_in_start_order() -> None:
    a, b = ("sglang", "r0"), ("dynamo", "r0")
    assert back_to_back([("05:01", a), ("05:02", a), ("05:04", b), ("05:03", b)])
    # Interleaved by setting, but a's two runs have b's between them.
    assert not back_to_back([("05:01", a), ("05:02", b), ("05:03", a), ("05:04", b)])
    assert not back_to_back([])


def test_spread_rule() -> None:
    assert spread([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert spread([]) != spread([])  # nan: nothing to judge


def test_engine_host_tokens_take_each_counters_growth() -> None:
    samples = pl.DataFrame(
        {
            "run_id": ["a"] * 4 + ["b"] * 2,
            "instance": [0, 0, 1, 1, 0, 0],
            "host_cached_tokens": [None, 300.0, 1000.0, 1500.0, None, None],
        }
    )
    # a: instance 0 from 0 (absent) to 300, instance 1 from 1000 to 1500; b: none.
    assert engine_host_tokens(samples) == {"a": 800.0, "b": 0.0}


def test_real_rows_pair_by_repeat_and_show_the_twin(section) -> None:
    s, data = section
    text = "\n".join(s.blocks)
    assert "### Real engines" in text
    # The setup sentence is read from the runs' configs, not written in.
    assert "2 tiny-model vLLM CPU instances whose engine KV holds 4,128 tokens each" in text
    assert "(host 64 MiB), 2 routers, 3 repeats each" in text
    # Read from the manifests' start and finish times: these runs alternate between settings.
    assert "HBM only and + host ran interleaved, each router's pair back to back." in text
    # Which processor the real runs ran on, against the twin's profile (none recorded here).
    assert "Processor of the real runs: unknown processor" in text
    assert "so the simulated column predicts another machine" in text
    hbm = _row(s, "| HBM only | sglang_cache_aware")
    host = _row(s, "| host 64 MiB | sglang_cache_aware")
    assert hbm[2] == "3" and host[2] == "3"  # three repeats each
    # The tier halves every request's TTFT: -50.0% at p50 and p90, paired by repeat.
    assert host[5].startswith("-50.0%") and host[8].startswith("-50.0%")
    assert hbm[5] == "-" and hbm[8] == "-"  # no tier to compare with
    # The twin's prediction (1.2x the real values in these records) beside the real row.
    sim = data.requests.filter(
        (pl.col("experiment") == "tiers_real_host_twin")
        & (pl.col("policy") == "sglang_cache_aware")
    )
    assert host[4] == f"{sim['ttft_s'].quantile(0.5) * 1000:.0f}"
    assert host[10] == "1.0-3.0"  # load1 over the repeats, from the manifests


def test_spread_rule_marks_a_difference_inside_the_repeats_spread(section) -> None:
    s, _ = section
    # predicted_ttft is 10% below the tier-blind router in every repeat (significant), but
    # the repeats themselves spread by 18% ((1.2 - 1.0) / 1.1): not beyond it.
    ours = _row(s, "| host 64 MiB | predicted_ttft")
    assert ours[9].startswith("-10.0%") and ours[9].endswith("(within spread)")
    gain = _row(s, "| host 64 MiB | sglang_cache_aware")
    assert "(within spread)" not in gain[8]  # -50% is far beyond a 10% spread


def test_tokens_table_takes_the_engines_counters_and_the_views_expectation(section) -> None:
    s, _ = section
    row = _row(s, "| host 64 MiB | sglang_cache_aware")
    tokens = next(
        [c.strip() for c in x.strip("|").split("|")]
        for x in "\n".join(s.blocks).splitlines()
        if x.startswith("| host 64 MiB | sglang_cache_aware") and x != "| " + " | ".join(row) + " |"
    )
    total = 3 * N_REQ * 1000
    engine_host = 3 * 2 * HOST_TOKENS_PER_INSTANCE
    assert tokens[2] == f"{total:,}"
    assert tokens[4] == f"{int(engine_host):,}"
    assert tokens[5] == f"{3 * N_REQ * PREDICTED_HOST:,}"
    cached = 3 * N_REQ * 600
    assert tokens[3] == (
        f"{(cached - engine_host) / total * 100:.1f}% / {engine_host / total * 100:.1f}% / "
        f"{(1 - cached / total) * 100:.1f}%"
    )
    assert tokens[6] == "60.0% / 25.0%"  # the twin's HBM / host shares


def test_answer_and_findings_speak_of_the_real_runs(section) -> None:
    s, _ = section
    assert "on real engines a host tier" in s.answer.lower()
    assert "beyond the repeats' spread" in s.answer
    # 2 instances x 1,000 host tokens a run served; the view expected 50 x 40 a run: 100%.
    assert "the proxy's exact view expected 100% of what they served" in s.answer
    assert "paired over 3 repeats" in s.answer
    assert any(f.startswith("real engines: + host 64 MiB vs HBM only") for f in s.findings)


def test_beyond_spread_needs_significance() -> None:
    assert beyond_spread(None, 0.0) is False
