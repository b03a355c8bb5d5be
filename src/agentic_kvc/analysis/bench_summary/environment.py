"""Summaries of the environment every process starts in: import and engine start-up times with
and without Python's compiled-module cache (benchmarks/process_startup.py)."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import Fig, field_at, num, summariser

TARGET_LABELS = {
    "vllm_api_server": "vLLM API server imports (one of an engine's three processes)",
    "notebook_run": "papermill + notebook kernel imports",
    "snakemake": "Snakemake imports",
    "claims_registry": "claims registry imports (jsonschema)",
    "akvc_cli": "`akvc --help`",
    "vllm_fleet": "2-instance vLLM CPU fleet, launch to healthy",
}


@summariser("process_startup", "what a new process pays before it works, with and without bytecode")
def _process_startup(doc: dict[str, Any]) -> list[Fig]:
    out = []
    for target, res in field_at(doc, "results").items():
        cached = float(field_at(res, "cached_median_s"))
        uncached = float(field_at(res, "uncached_median_s"))
        ratio = float(field_at(res, "uncached_over_cached_median"))
        lo, hi = (float(x) for x in field_at(res, "uncached_over_cached_range"))
        out.append(
            Fig(
                f"{TARGET_LABELS.get(target, target)}: median s, compiled modules cached vs not",
                f"{num(cached)} vs {num(uncached)} s (paired ratio x{num(ratio)}, "
                f"rounds x{num(lo)}-{num(hi)})",
            )
        )
    return out
