"""Study 7, real engines: two vLLM CPU instances, repeated and interleaved, beside the simulator.

On a shared 2-core machine a real run's latencies move several fold with the machine's load,
so every variant runs several times, repeat-major (all variants of repeat 0, then repeat 1...),
and each run's manifest records the machine's load and CPU steal over it. A difference between
two policies counts only when its paired interval (pairs: the same repeat) excludes 0 and it
is larger than the spread of the repeats themselves. The simulator's prediction (the same
config in the simulator, `cpu-tiny` profile) stands beside each measured row.

`predicted_ttft` runs twice on the same fleet (one experiment, interleaved with the others):
given the `cpu-tiny` profile (calibrated here, but off by about half at p90 against real runs)
and fitting its step cost online from the streams the proxy relays, started from that profile.
Two rows of one policy differ in their params; their variant names say which.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    finding_text,
    ms,
    num,
    pct,
)
from agentic_kvc.analysis.studies.common import (
    WITHIN_SPREAD,
    beyond_spread,
    mean_range_ms,
    online_fit_table,
    ordered,
    repeat_spread,
    study,
)
from agentic_kvc.analysis.studies.figures import sim_vs_real
from agentic_kvc.analysis.tables import latency_summary
from agentic_kvc.paired import PairedResult
from agentic_kvc.processor import processor_label, same_processor
from agentic_kvc.speed_probe import SHOWN, probe_ms

NAME = "real"
TITLE = "7. Real engines: two vLLM CPU instances"
QUESTION = (
    "On real vLLM engines (CPU, tiny model, two instances), do the policies differ by more "
    "than the run-to-run spread, and how far is the simulator's prediction from each?"
)
BASELINE = "round_robin"
# The model-based rows are also paired against unified (the other policy with a cost model).
UNIFIED = "unified"
PROFILE = "predicted_ttft (cost_model=profile)"
ONLINE = "predicted_ttft (cost_model=online, online_prior=profile)"
REPIN = "adaptive v2 (NIXL)"
PINNING = "adaptive v2 (NIXL, vLLM's pinning)"
ORDER = (
    "round_robin",
    "lmetric",
    "unified",
    PROFILE,
    ONLINE,
    REPIN,
    PINNING,
)


def host_load(manifest: dict[str, Any]) -> dict[str, float | None]:
    """Mean 1-minute load, the CPU busy / steal shares over the run and the speed probe at its
    start (its interpreter and memory kernels' best, ms; None before runs recorded them), from
    the manifest."""
    hl = (manifest.get("backend_info") or {}).get("host_load") or {}
    run = hl.get("run") or {}
    overall = run.get("overall") or {}
    speed = hl.get("speed_start")
    return {
        "load1": (run.get("load1") or {}).get("mean"),
        "busy": overall.get("busy"),
        "steal": overall.get("steal"),
        **{key: probe_ms(speed, key) for key in SHOWN},
    }


MACHINE_COLUMNS = ["load1", "steal max", f"probe (ms): {' / '.join(SHOWN.values())}"]
MACHINE_NOTE = (
    "Machine: 1-minute load average over each run (min-max over repeats), the largest CPU "
    "steal share, and the speed probe at each run's start (two fixed kernels' CPU time, "
    "min-max; higher is a slower machine; agentic_kvc/speed_probe.py, '-' for runs made "
    "before it was recorded)."
)


def _span(values: list[float], digits: int = 1) -> str:
    return f"{num(min(values), digits)}-{num(max(values), digits)}" if values else "-"


def machine_cells(loads: list[dict[str, float | None]]) -> list[str]:
    """The MACHINE_COLUMNS cells of a variant's runs (their `host_load` dicts)."""

    def values(key: str) -> list[float]:
        return [v for x in loads if (v := x.get(key)) is not None]

    steal = values("steal")
    probes = [values(k) for k in SHOWN]
    return [
        _span(values("load1")),
        pct(max(steal)) if steal else "-",
        " / ".join(_span(v) for v in probes) if any(probes) else "-",
    ]


RECALIBRATE = "make recalibrate"


def processor_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The recorded processor of a run (older manifests kept only the model name)."""
    hw = manifest.get("hardware") or {}
    return hw.get("processor") or {"model_name": hw.get("cpu")}


def profile_processor(path: Path | None = None) -> tuple[dict[str, Any], str]:
    """The processor the `cpu-tiny` profile was calibrated on, and when."""
    from agentic_kvc.profiles import CPU_TINY_FILE

    try:
        doc = json.loads((path or CPU_TINY_FILE).read_text())
    except (OSError, ValueError):
        return {}, "?"
    machine = doc.get("machine") or {}
    return machine.get("processor") or {"model_name": machine.get("cpu")}, str(doc.get("date"))


def speed_note(manifests: list[dict[str, Any]], profile: Path | None = None) -> str:
    """How fast the machine ran the real runs against when the `cpu-tiny` profile was fitted,
    from the speed probes both recorded (speed_probe.py; per kernel, the median over runs of
    each run's best); "" when the runs recorded none. On one processor kind a slower machine
    makes the real latencies longer than the profile predicts, with no change of load or
    steal."""
    from statistics import median

    from agentic_kvc.profiles import CPU_TINY_FILE

    loads = [host_load(m) for m in manifests]
    now = {
        key: median(vs) for key in SHOWN if (vs := [v for x in loads if (v := x[key]) is not None])
    }
    if not now:
        return ""
    runs = max(sum(x[key] is not None for x in loads) for key in now)
    try:
        machine = json.loads((profile or CPU_TINY_FILE).read_text()).get("machine") or {}
    except (OSError, ValueError):
        machine = {}
    then = {key: probe_ms(machine.get("speed"), key) for key in now}
    said = ", ".join(f"{SHOWN[k]} {num(v, 1)} ms" for k, v in now.items())
    head = f" The speed probe at the real runs' starts (median of {runs}): {said}"
    both = {k: (v, then[k]) for k, v in now.items() if then[k]}
    if not both:
        return (
            head + "; the profile was fitted before probes were recorded, so how much faster or "
            "slower this machine ran then is not known."
        )
    ratios = ", ".join(
        f"{SHOWN[k]} {num(b, 1)} ms ({num(a / b, 2)}x as slow now)" for k, (a, b) in both.items()
    )
    return (
        head + f"; when the profile was fitted: {ratios}. Above 1 the machine ran slower than "
        "when the profile was fitted, and real latencies are expected above its predictions."
    )


def processor_note(manifests: list[dict[str, Any]], profile: Path | None = None) -> str:
    """Which processors the real runs ran on, against the simulator profile's, and what to do
    when they differ: a CPU profile predicts the machine it was fitted on (docs/sim_profiles.md,
    "Another processor")."""
    seen: dict[str, dict[str, Any]] = {}
    for m in manifests:
        info = processor_of(m)
        seen.setdefault(info.get("label") or processor_label(info), info)
    prof, date = profile_processor(profile)
    prof_label = prof.get("label") or processor_label(prof)
    runs = "; ".join(sorted(seen)) or "not recorded"
    text = f"Processor of the real runs: {runs}. The simulator's `cpu-tiny` profile was "
    text += f"calibrated on {prof_label} ({date})"
    verdicts = [same_processor(info, prof) for info in seen.values()]
    if verdicts and all(v is True for v in verdicts):
        return text + ", the same kind." + speed_note(manifests, profile)
    how = "differs from" if any(v is False for v in verdicts) else "cannot be matched to"
    return (
        text + f"; that {how} this machine's, so the simulated column predicts another "
        f"machine. Recalibrate here with `{RECALIBRATE}` (about 10 minutes on a quiet machine; "
        'docs/sim_profiles.md, "Another processor").'
    )


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    real = df.filter(pl.col("backend") != "sim")
    sim = df.filter(pl.col("backend") == "sim")
    if real.is_empty():
        s.answer = "No real runs are complete here, so the data do not decide it."
        return s
    per_run = latency_summary(real, ["variant", "run_id", "replicate"])
    sim_v = {r["variant"]: r for r in latency_summary(sim, ["variant"]).iter_rows(named=True)}
    loads = {p.run_id: host_load(m) for p, m in data.manifests()}
    archived = {r.run_id for r, _ in data.runs if r.source == "archive"}
    variants = ordered(sorted(set(real["variant"])), ORDER)
    source_of = {
        v: set(per_run.filter(pl.col("variant") == v)["run_id"].to_list()) <= archived
        for v in variants
    }
    rows, verdicts = [], []
    against_unified = []
    spread_of: dict[str, float] = {}
    for v in variants:
        runs = per_run.filter(pl.col("variant") == v)
        t50 = runs["ttft_s_p50"].to_list()
        e50 = runs["e2e_s_p50"].to_list()
        spread_of[v] = repeat_spread(t50)
        lv = [loads.get(r, {}) for r in runs["run_id"].to_list()]
        sv = sim_v.get(v)
        sim_t = sv["ttft_s_p50"] if sv else None
        inside = "-" if sim_t is None else ("yes" if min(t50) <= sim_t <= max(t50) else "no")
        c = compare(real, BASELINE, v, "ttft_p50") if v != BASELINE else None
        c_u = compare(real, UNIFIED, v, "ttft_p50") if v in (PROFILE, ONLINE) else None
        errors = int(runs["errors"].sum())
        from_archive = source_of[v]
        # Archived runs against this checkout's round-robin: the repeats pair by index but ran
        # in different sessions under different load, so the pair is not interleaved.
        mixed = c is not None and source_of.get(BASELINE, from_archive) != from_archive
        rows.append(
            [
                v + (" (archived runs)" if from_archive else ""),
                f"{len(t50)}" + (f" ({errors} failed requests)" if errors else ""),
                mean_range_ms(t50),
                ms(sim_t),
                inside,
                f"{num(sum(e50) / len(e50))} ({num(min(e50))}-{num(max(e50))})",
                num(sim_v[v]["e2e_s_p50"]) if sv else "-",
                diff_cell(c) + (" (not interleaved)" if mixed else ""),
                diff_cell(c_u),
                *machine_cells(lv),
            ]
        )
        if c is not None:
            beyond = beyond_spread(c, spread_of[BASELINE], spread_of[v])
            verdicts.append((v, c, beyond, mixed))
        if c_u is not None:
            against_unified.append((v, c_u, max(spread_of.get(UNIFIED, 0.0), spread_of[v])))
    fig = sim_vs_real(
        [
            (
                v,
                [x * 1000 for x in per_run.filter(pl.col("variant") == v)["ttft_s_p50"].to_list()],
                sim_v[v]["ttft_s_p50"] * 1000 if v in sim_v else None,
            )
            for v in variants
        ],
        figures / "sim_vs_real_ttft.svg",
        "TTFT p50 (ms)",
        "Real vLLM CPU repeats against the simulator's prediction, per variant",
    )
    if fig is not None:
        s.figure(
            fig,
            "Simulated against real: each real repeat's TTFT p50 (dots, range shaded) and the "
            "simulator's prediction for the same config (cross).",
            root,
        )
    s.table(
        "Each real variant's repeats (TTFT p50 per run: mean, min-max), the simulator's "
        "prediction for the same config, and TTFT p50 paired against round-robin over repeats "
        "(95% interval); the two predicted_ttft rows also against unified, the other policy "
        f"with a cost model. {MACHINE_NOTE} Archived runs were made earlier on this machine kind "
        "with the same config and are read from results/archive/ (their manifests say when); "
        "paired with this checkout's round-robin they were not interleaved with it, so the "
        "difference is marked and not judged. "
        "NIXL engines on CPU put the worker's threads back on their own core (docs/pd.md); "
        "the vLLM's-pinning row turns that off (the runs before the fix are kept in "
        "results/archive/before_nixl_repin/).",
        [
            "variant",
            "repeats",
            "TTFT p50 (ms)",
            "sim TTFT p50",
            "sim inside repeats",
            "E2E p50 (s)",
            "sim E2E p50",
            "vs RR (TTFT p50)",
            "vs unified",
            *MACHINE_COLUMNS,
        ],
        rows,
    )
    parts = []
    for v, c, beyond, mixed in verdicts:
        if mixed:
            parts.append(
                f"{v} (archived runs) vs this checkout's round-robin is {diff_cell(c)}, but the "
                "two were not run interleaved, so the load differs and it is not a finding "
                "(the archived campaign's own interleaved comparison is in its README)"
            )
            s.findings.append(
                finding_text(c, f"real engines: {v} vs round_robin, TTFT p50")
                + "; archived runs vs this checkout's round-robin, not interleaved: not a finding"
            )
            continue
        if beyond:
            parts.append(
                f"{v} differs from round-robin by {diff_cell(c)}, beyond the repeats' spread"
            )
        else:
            parts.append(
                f"{v} vs round-robin ({diff_cell(c)}) is within the repeats' own spread "
                f"(up to {max(spread_of[BASELINE], spread_of[v]) * 100:.0f}% of the mean)"
            )
        s.findings.append(
            finding_text(c, f"real engines: {v} vs round_robin, TTFT p50")
            + ("" if beyond else f"; {WITHIN_SPREAD}")
        )
    for v, c, spread in against_unified:
        where = "beyond" if beyond_spread(c, spread) else "within"
        parts.append(
            f"{v} vs unified ({diff_cell(c)}) is {where} the repeats' spread "
            f"({spread * 100:.0f}% of the mean)"
        )
    repin, pinning = REPIN, PINNING
    if source_of.get(repin) and source_of.get(pinning):
        # Both archived, from one interleaved campaign: their own pair is a finding (C10).
        c = compare(real, repin, pinning, "ttft_p50")
        if c is not None:
            spread = max(spread_of[repin], spread_of[pinning])
            beyond = beyond_spread(c, spread)
            parts.append(
                f"in the archived campaign, vLLM's own NIXL pinning against the re-pin moves "
                f"adaptive v2's TTFT p50 by {diff_cell(c)}, "
                + ("beyond" if beyond else "within")
                + f" the repeats' spread ({spread * 100:.0f}% of the mean)"
            )
            s.findings.append(
                finding_text(
                    c,
                    "real engines (archived campaign): adaptive v2 with vLLM's pinning vs "
                    "re-pinned, TTFT p50",
                )
                + ("" if beyond else f"; {WITHIN_SPREAD}")
            )
    online_fit_table(
        s,
        data,
        "real CPU engines and their simulated twins; the prior is the cpu-tiny profile's fit",
    )
    s.note(processor_note([m for _, m in data.manifests() if m.get("backend") != "sim"]))
    s.answer = _answer(parts, verdicts)
    return s


def _answer(parts: list[str], verdicts: list[tuple[str, PairedResult, bool, bool]]) -> str:
    """One sentence of counts (how many variants differ from round-robin beyond the repeats'
    own spread), then each comparison as a bullet."""
    if not parts:
        return "Only one variant has real runs."
    judged = [v for v, _, _, mixed in verdicts if not mixed]
    differ = [v for v, _, b, mixed in verdicts if b and not mixed]
    if judged:
        lead = (
            f"On these real engines {len(differ)} of {len(judged)} variants differ from "
            "round-robin's TTFT p50 by more than the repeats' own spread"
            + (f" ({', '.join(differ)})" if differ else "")
            + "."
        )
    else:
        lead = "No variant here ran interleaved with this checkout's round-robin: none is judged."
    return lead + "\n\n" + "\n".join(f"- {p}." for p in parts)
