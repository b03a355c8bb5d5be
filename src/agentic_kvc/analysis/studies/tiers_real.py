"""The tiers study on real engines (issue 30 item 4): HBM only vs + a host tier, x routing.

Two tiny-model vLLM CPU instances whose engine KV (the "HBM") is kept small, so agent
sessions that pause for a tool call lose their prefix before their next turn; + host adds
a host-memory tier per instance (vLLM's SimpleCPUOffloadConnector, host copies on the CPU
engine: serve/host_copy_offload_connector.py). Each tier setting is one fleet; the routers and the
repeats run on it repeat-major. Every router reads the exact cache view (KV events with the
tier's medium), so the proxy's records carry the host tokens the view expected
(`predicted_host_tokens`) beside the engine's `cached_tokens` (HBM hit plus tier loads), and
the instance samples carry the engine's own counter of host-tier hit tokens
(`host_cached_tokens`, from `vllm:prompt_tokens_cached_by_source_total{source="host"}`).

Differences are paired over repeats (the same repeat index: the same sessions) and judged by
the real-engine rule of docs/statistics.md: significant *and* larger than the repeats' own
spread. The simulator's prediction for the same configs (`_twin` experiments, cpu-tiny
profile) stands beside each row. The two tier settings are two fleets run one after the
other, so their pairs were not interleaved as the routers' are: the machine's load beside
each row says whether it moved between them.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    finding_text,
    ms,
    pct,
)
from agentic_kvc.analysis.studies.common import (
    WITHIN_SPREAD,
    beyond_spread,
    mean_range_ms,
    ordered,
    repeat_spread,
)
from agentic_kvc.analysis.studies.real import (
    MACHINE_COLUMNS,
    MACHINE_NOTE,
    host_load,
    machine_cells,
    processor_note,
)
from agentic_kvc.paired import PairedResult

PREFIX = "tiers_real"  # the experiments of this part of the study: tiers_real_*
HBM_ONLY = "HBM only"
TIER_BLIND = "sglang_cache_aware"
OURS = "predicted_ttft"
ROUTERS = (TIER_BLIND, "llmd_precise", "dynamo_kv", OURS)
METRICS = ("ttft_p50", "ttft_p90")


def is_real_tiers(experiment: str) -> bool:
    return experiment.startswith(PREFIX)


def tier_label(host_gib: float) -> str:
    """`HBM only`, or the host tier's size (`host 64 MiB`, `host 2 GiB`)."""
    if host_gib <= 0:
        return HBM_ONLY
    if host_gib < 1:
        return f"host {host_gib * 1024:g} MiB"
    return f"host {host_gib:g} GiB"


def _host_gib(config: dict[str, Any]) -> float:
    tiers = (config.get("fleet") or {}).get("kv_tiers") or {}
    return float(tiers.get("host_gib") or 0.0)


def interleaved(spans: dict[str, list[tuple[str, str]]]) -> bool:
    """Whether the tier settings' runs were interleaved: every setting's span (first start to
    last finish, ISO times of one clock) overlaps every other's. Settings run one after the
    other (a fleet each, in turn) do not overlap."""
    bounds = [(min(a for a, _ in v), max(b for _, b in v)) for v in spans.values() if v]
    return len(bounds) > 1 and all(
        a0 < b1 and a1 < b0 for i, (a0, b0) in enumerate(bounds) for a1, b1 in bounds[i + 1 :]
    )


def back_to_back(started: list[tuple[str, Any]]) -> bool:
    """Whether the runs of each pair (the same router and repeat, one per tier setting) ran
    next to each other: in start order, a pair's runs are consecutive. `started`: (start
    time, pair key) per run."""
    keys = [k for _, k in sorted(started, key=lambda x: x[0])]
    runs_of: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        runs_of.setdefault(k, []).append(i)
    return bool(runs_of) and all(v[-1] - v[0] == len(v) - 1 for v in runs_of.values())


def engine_host_tokens(samples: pl.DataFrame) -> dict[str, float]:
    """Per run: prompt tokens the engines' host tiers served, from their own counters (the
    growth of `host_cached_tokens` over the run, summed over instances; a sample without
    the counter counts 0, as an engine that has not yet served from the tier reports)."""
    if samples.is_empty() or "host_cached_tokens" not in samples.columns:
        return {}
    per = samples.group_by("run_id", "instance").agg(
        (
            pl.col("host_cached_tokens").fill_null(0.0).max()
            - pl.col("host_cached_tokens").fill_null(0.0).min()
        ).alias("grew")
    )
    return {
        str(r["run_id"]): float(r["grew"])
        for r in per.group_by("run_id").agg(pl.col("grew").sum()).iter_rows(named=True)
    }


def _judged(r: PairedResult | None, beyond: bool) -> str:
    if r is None:
        return "-"
    text = diff_cell(r)
    if r.significant and not beyond:
        text += " (within spread)"
    return text


def _per_run(df: pl.DataFrame) -> pl.DataFrame:
    ok = df.filter(pl.col("error").is_null())
    return (
        ok.group_by("run_id", "tier", "policy", "replicate")
        .agg(
            pl.col("ttft_s").quantile(0.5).alias("ttft_p50"),
            pl.col("ttft_s").quantile(0.9).alias("ttft_p90"),
        )
        .join(
            df.group_by("run_id").agg(
                pl.len().alias("requests"),
                pl.col("error").is_not_null().sum().alias("errors"),
                pl.col("input_tokens").sum().alias("input_tokens"),
                pl.col("cached_tokens").fill_null(0).sum().alias("cached_tokens"),
                (
                    pl.col("predicted_host_tokens").fill_null(0).sum()
                    if "predicted_host_tokens" in df.columns
                    else pl.lit(0)
                ).alias("predicted_host"),
            ),
            on="run_id",
        )
        .sort("run_id")
    )


def _sim_row(sim: pl.DataFrame) -> dict[str, float]:
    ok = sim.filter(pl.col("error").is_null())
    total = max(int(ok["input_tokens"].sum()), 1)
    host = ok["host_tokens"].fill_null(0).sum() if "host_tokens" in ok.columns else 0
    return {
        "ttft_p50": float(ok["ttft_s"].quantile(0.5) or float("nan")),
        "ttft_p90": float(ok["ttft_s"].quantile(0.9) or float("nan")),
        "hbm": float(ok["cached_tokens"].fill_null(0).sum()) / total,
        "host": float(host) / total,
    }


def analyse_real(s: Section, df: pl.DataFrame, data: StudyData) -> str:
    """Add the real-engine tables, notes and findings to `s`; return the answer's sentence
    about them ("" when no real run is complete)."""
    config_of = {r.run_id: r.config for r, _ in data.runs}
    tiers = [tier_label(_host_gib(config_of.get(str(x), {}))) for x in df["run_id"]]
    df = df.with_columns(pl.Series("tier", tiers, dtype=pl.String))
    real = df.filter(pl.col("backend") != "sim")
    sim = df.filter(pl.col("backend") == "sim")
    if real.is_empty():
        return ""
    samples = data.samples()
    if not samples.is_empty():
        samples = samples.filter(pl.col("run_id").is_in(real["run_id"].unique().implode()))
    host_by_run = engine_host_tokens(samples)
    manifests = data.manifests()
    loads = {p.run_id: host_load(m) for p, m in manifests}
    runs = _per_run(real)
    of_run = {str(r["run_id"]): r for r in runs.iter_rows(named=True)}
    spans: dict[str, list[tuple[str, str]]] = {}
    started: list[tuple[str, Any]] = []
    for p, m in manifests:
        r = of_run.get(p.run_id)
        if r is not None and m.get("started_at") and m.get("finished_at"):
            spans.setdefault(r["tier"], []).append((m["started_at"], m["finished_at"]))
            started.append((m["started_at"], (r["policy"], r["replicate"])))
    if not interleaved(spans):
        order_note = "HBM only and + host ran on two fleets one after the other, not interleaved."
    elif back_to_back(started):
        order_note = "HBM only and + host ran interleaved, each router's pair back to back."
    else:
        order_note = "HBM only and + host ran interleaved."
    tier_order = [HBM_ONLY, *sorted(t for t in set(runs["tier"]) if t != HBM_ONLY)]
    routers = ordered(sorted(set(runs["policy"])), ROUTERS)
    sim_rows = {
        (str(t), str(r)): _sim_row(part)
        for (t, r), part in sim.partition_by(["tier", "policy"], as_dict=True).items()
    }
    spreads: dict[tuple[str, str, str], float] = {}
    for (t, r), part in runs.partition_by(["tier", "policy"], as_dict=True).items():
        for m in METRICS:
            spreads[(str(t), str(r), m)] = repeat_spread(part[m].to_list())

    def diff(
        base: str, cand: str, by: str, where: pl.Expr, m: str, key_b: Any, key_c: Any
    ) -> tuple[PairedResult | None, bool]:
        r = compare(real.filter(where), base, cand, m, by=by)
        return r, beyond_spread(r, spreads.get(key_b, 0.0), spreads.get(key_c, 0.0))

    lat_rows, tok_rows = [], []
    tier_gain: dict[tuple[str, str, str], tuple[PairedResult | None, bool]] = {}
    vs_blind: dict[tuple[str, str, str], tuple[PairedResult | None, bool]] = {}
    for t in tier_order:
        for r in routers:
            part = runs.filter((pl.col("tier") == t) & (pl.col("policy") == r))
            if part.is_empty():
                continue
            ids = part["run_id"].to_list()
            cells: list[str] = []
            for m in METRICS:
                vs_hbm: tuple[PairedResult | None, bool] = (None, False)
                if t != HBM_ONLY:
                    vs_hbm = diff(
                        HBM_ONLY,
                        t,
                        "tier",
                        (pl.col("policy") == r) & pl.col("tier").is_in([HBM_ONLY, t]),
                        m,
                        (HBM_ONLY, r, m),
                        (t, r, m),
                    )
                    tier_gain[(t, r, m)] = vs_hbm
                sim_v = sim_rows.get((t, r), {}).get(m)
                cells += [mean_range_ms(part[m].to_list()), ms(sim_v), _judged(*vs_hbm)]
            blind: tuple[PairedResult | None, bool] = (None, False)
            if r != TIER_BLIND:
                blind = diff(
                    TIER_BLIND,
                    r,
                    "policy",
                    (pl.col("tier") == t) & pl.col("policy").is_in([TIER_BLIND, r]),
                    "ttft_p90",
                    (t, TIER_BLIND, "ttft_p90"),
                    (t, r, "ttft_p90"),
                )
                vs_blind[(t, r, "ttft_p90")] = blind
            lv = [loads.get(i, {}) for i in ids]
            errors = int(part["errors"].sum())
            lat_rows.append(
                [
                    t,
                    r,
                    f"{part.height}" + (f" ({errors} failed requests)" if errors else ""),
                    *cells,
                    _judged(*blind),
                    *machine_cells(lv),
                ]
            )
            total = max(int(part["input_tokens"].sum()), 1)
            engine_host = sum(host_by_run.get(i, 0.0) for i in ids)
            cached = float(part["cached_tokens"].sum())
            sv = sim_rows.get((t, r))
            tok_rows.append(
                [
                    t,
                    r,
                    f"{total:,}",
                    f"{pct(max(cached - engine_host, 0.0) / total)} / "
                    f"{pct(engine_host / total)} / {pct(max(1 - cached / total, 0.0))}",
                    f"{int(engine_host):,}",
                    f"{int(part['predicted_host'].sum()):,}",
                    f"{pct(sv['hbm'])} / {pct(sv['host'])}" if sv else "-",
                ]
            )
    fleets = [(config_of.get(str(i)) or {}).get("fleet") or {} for i in runs["run_id"]]
    kv_tokens = sorted(
        {f"{int(f['kv_cache_tokens']):,}" for f in fleets if f.get("kv_cache_tokens")}
    )
    n_inst = sorted({str(f.get("instances")) for f in fleets if f.get("instances")})
    s.note(
        "### Real engines: vLLM CPU instances with a small engine KV\n\n"
        f"The same question on real engines: {' / '.join(n_inst) or '?'} tiny-model vLLM CPU "
        f"instances whose engine KV holds {' / '.join(kv_tokens) or '?'} tokens each (so a "
        "pausing session loses its prefix), HBM only or with a host tier per instance "
        f"({', '.join(t for t in tier_order if t != HBM_ONLY)}), {len(routers)} routers, "
        f"{runs['replicate'].n_unique()} repeats each, repeat-major. {order_note} Setup: "
        "config/runs/real_cpu_tiers.yaml and experiments `tiers_real_*`; docs/kv_tiers_real.md "
        "section 7."
    )
    s.table(
        "TTFT per tier setting and router on real engines: per-repeat TTFT p50 and p90 (mean "
        "and min-max over repeats), the simulator's prediction for the same config (cpu-tiny "
        "profile), and paired differences over repeats (95% intervals): *vs HBM only*, the "
        "same router without the tier; *vs tier-blind*, TTFT p90 against sglang_cache_aware "
        "with the same tiers. A significant difference no larger than the repeats' own "
        f"spread is marked *within spread* (docs/statistics.md). {order_note} {MACHINE_NOTE}",
        [
            "tiers",
            "router",
            "repeats",
            "TTFT p50 (ms)",
            "sim p50",
            "p50 vs HBM only",
            "TTFT p90 (ms)",
            "sim p90",
            "p90 vs HBM only",
            "p90 vs tier-blind",
            *MACHINE_COLUMNS,
        ],
        lat_rows,
    )
    # The sim columns predict the processor the cpu-tiny profile was fitted on (study 7's rule).
    s.note(processor_note([m for p, m in manifests if p.run_id in of_run]))
    s.table(
        "Where the prompt tokens came from on real engines, pooled over repeats. Engine: "
        "HBM / host / recomputed shares, where host is the engines' own counter of tokens "
        'their host tier served (`vllm:prompt_tokens_cached_by_source_total{source="host"}`, '
        "its growth over each run) and HBM is the rest of the engine-reported cached "
        "tokens. View: the host tokens the proxy's exact view expected the chosen instance "
        "to load (from the KV events' medium), beside the engine's count. Simulated: the "
        "twin's HBM / host shares.",
        [
            "tiers",
            "router",
            "prompt tokens",
            "engine HBM / host / recomputed",
            "engine host tokens",
            "view's expected host tokens",
            "sim HBM / host",
        ],
        tok_rows,
    )
    s.note(
        "What a tier buys on this engine: a reload here is a host memcpy of the tiny model's "
        "KV (the engine's own KV is host memory too) that stands in for a prefill of the tiny "
        "model, itself short; and the engine's scheduler serves a tier hit one step later (an "
        "asynchronous load). The gain measured here is that saved prefill and the queueing it "
        "frees, not a GPU link's bandwidth, so it grows with what a prefill costs on the "
        "processor at hand (the probe column; docs/kv_tiers_real.md section 7 has the same runs "
        "on two processor kinds), and "
        "on a shared 2-core machine it is of the order of the repeats' own spread; on a GPU the "
        "same tier saves a large model's prefill and costs a PCIe copy (docs/kv_tiers.md)."
    )
    return _answer(s, tier_gain, vs_blind, runs, host_by_run)


def _answer(
    s: Section,
    tier_gain: dict[tuple[str, str, str], tuple[PairedResult | None, bool]],
    vs_blind: dict[tuple[str, str, str], tuple[PairedResult | None, bool]],
    runs: pl.DataFrame,
    host_by_run: dict[str, float],
) -> str:
    parts = []
    for (t, r, m), (res, beyond) in sorted(tier_gain.items()):
        if res is None:
            continue
        what = f"real engines: + {t} vs HBM only, {r}, TTFT {m.split('_')[1]}"
        s.findings.append(finding_text(res, what) + ("" if beyond else "; not beyond spread"))
    for (t, r, _), (res, beyond) in sorted(vs_blind.items()):
        if res is None:
            continue
        what = f"real engines, {t}: {r} vs tier-blind {TIER_BLIND}, TTFT p90"
        s.findings.append(finding_text(res, what) + ("" if beyond else "; not beyond spread"))
    blind = {k: v for k, v in tier_gain.items() if k[1] == TIER_BLIND and v[0] is not None}
    if blind:
        parts.append(
            "on real engines a host tier moves the tier-blind router's "
            + "; ".join(
                f"TTFT {m.split('_')[1]} by {diff_cell(res)}"
                + (
                    " (beyond the repeats' spread)"
                    if beyond
                    else f" ({WITHIN_SPREAD})"
                    if res.significant
                    else ""
                )
                for (_, _, m), (res, beyond) in sorted(blind.items(), key=lambda x: x[0][2])
            )
        )
    hosted = runs.filter(pl.col("tier") != HBM_ONLY)
    if not hosted.is_empty():
        served = sum(host_by_run.get(i, 0.0) for i in hosted["run_id"].to_list())
        total = max(int(hosted["input_tokens"].sum()), 1)
        expected = float(hosted["predicted_host"].sum())
        parts.append(
            f"the engines' own counters say the host tier served {pct(served / total)} of "
            "the prompt tokens with it on"
            + (
                f", and the proxy's exact view expected {pct(expected / served, 0)} of what "
                "they served"
                if served
                else ""
            )
        )
    for (t, r, _), (res, beyond) in sorted(vs_blind.items()):
        if r == OURS and t != HBM_ONLY and res is not None:
            parts.append(
                f"with the {t} tier, {OURS} against the tier-blind router is {diff_cell(res)} "
                "on TTFT p90" + ("" if beyond or not res.significant else f" ({WITHIN_SPREAD})")
            )
    if not parts:
        return ""
    n = runs["replicate"].n_unique()
    return "; ".join(parts) + f" (paired over {n} repeats, 95% intervals)"
