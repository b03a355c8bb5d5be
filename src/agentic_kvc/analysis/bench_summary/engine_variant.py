"""What the summaries of an engine-side variant on real vLLM engines share
(benchmarks/engine_variant_real.py: finished sessions first, `finish_first_real*` in tiers.py;
a waiting request's prefix refreshed on arrival, `refresh_on_arrival_real` in prefix_cache.py):
the variants' names, one comparison by backend, router and measure, the rerun-to-rerun spread of
a pair, and the machine's load during the real replays."""

from __future__ import annotations

import statistics
from typing import Any

from agentic_kvc.analysis.bench_summary.core import Fig, LayoutError, field_at, paired_cell


def variant_names(doc: dict[str, Any], default: tuple[str, str]) -> tuple[str, str]:
    """(baseline, candidate): the file's `parameters.variants`, baseline first; `default`
    where the file names none."""
    names = list(doc.get("parameters", {}).get("variants") or default)
    if len(names) != 2:
        raise LayoutError(f"parameters.variants: two variants expected, got {names}")
    return names[0], names[1]


def listed(comps: list[dict[str, Any]]) -> str:
    """ "; <policy> <metric> <paired cell>" for each comparison, to follow a count in a row."""
    return "".join(f"; {c['policy']} {c['metric']} {paired_cell(c)}" for c in comps)


def pick(comps: list[dict[str, Any]], backend: str, policy: str, metric: str) -> Any:
    """The comparison of `metric` for `policy` on `backend`, or None."""
    return next(
        (c for c in comps if (c["backend"], c["policy"], c["metric"]) == (backend, policy, metric)),
        None,
    )


def replicate_spread(
    runs: list[dict[str, Any]], baseline: str, candidate: str, label: str
) -> list[Fig]:
    """With real replicates (`--replicates`): per router, the ratio of the two variants' TTFT
    p90 per (seed, replicate) pair, and the seeds where it is above 1 in every replicate (a
    single pair per seed hides how much a rerun moves it). `label`: the ratio's name."""
    real = [r for r in runs if r.get("backend") == "vllm" and "replicate" in r]
    if len({r["replicate"] for r in real}) < 2:
        return []
    p90: dict[tuple[str, int, int], dict[str, float]] = {}
    for r in real:
        key = (str(r["policy"]), int(r["seed"]), int(r["replicate"]))
        p90.setdefault(key, {})[str(r["variant"])] = float(r["ttft_p90_s"])
    figs = []
    for policy in sorted({k[0] for k in p90}):
        ratios: dict[int, list[float]] = {}
        for (p, seed, _rep), v in sorted(p90.items()):
            if p == policy and {baseline, candidate} <= v.keys() and v[baseline] > 0:
                ratios.setdefault(seed, []).append(v[candidate] / v[baseline])
        flat = sorted(x for xs in ratios.values() for x in xs)
        if not flat:
            continue
        always = [s for s, xs in ratios.items() if all(x > 1 for x in xs)]
        never = [s for s, xs in ratios.items() if all(x < 1 for x in xs)]
        figs.append(
            Fig(
                f"{policy}, real: TTFT p90 {label} per (seed, replicate) pair",
                f"median x{statistics.median(flat):.2f}, range x{flat[0]:.2f}-x{flat[-1]:.2f}; "
                f"above 1 in {sum(x > 1 for x in flat)} of {len(flat)} pairs; above 1 in every "
                f"replicate for seeds {', '.join(map(str, always)) or 'none'}, below 1 in "
                f"every replicate for seeds {', '.join(map(str, never)) or 'none'} "
                f"(of {len(ratios)} seeds)",
            )
        )
    return figs


def real_load(doc: dict[str, Any]) -> Fig:
    """The 1-minute load average sampled during the real replays: runs' means, highest."""
    loads = [
        r["load1_replay"]
        for r in field_at(doc, "runs")
        if r.get("backend") == "vllm" and isinstance(r.get("load1_replay"), dict)
    ]
    return Fig(
        "machine load during the real replays (1-minute average: runs' means, highest)",
        f"{min(x['mean'] for x in loads):.1f}-{max(x['mean'] for x in loads):.1f}, "
        f"{max(x['max'] for x in loads):.1f}"
        if loads
        else "not recorded",
    )
