"""Report section `epd`: default vs EPD serving of a multimodal model in simulation
(agentic_kvc.epd.bench), from results/epd/{records.jsonl,summary.json}; docs/epd.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.analysis.studies.base import Section, md_table
from agentic_kvc.analysis.studies.figures import interval_chart
from agentic_kvc.epd.bench import PUBLISHED
from agentic_kvc.io import read_jsonl
from agentic_kvc.paired import fmt_diff

TITLE = "EPD: encoder on its own instance, encoder cache sent over Redis (simulation)"
QUESTION = (
    "Does moving the vision encoder off the prefill-decode engine remove the encoder stall "
    "from TPOT, and what does it cost in TTFT and throughput, at 100 to 1,000 prompts?"
)
METRIC = ("median_tpot_ms", "req_per_s", "median_ttft_ms")
KEYS = ("rel_diff", "ci_low", "ci_high")


def paired_median_rel(base: np.ndarray, new: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Relative change of the median, new vs base, paired by request; 95% bootstrap interval."""
    rng = np.random.default_rng(seed)
    point = float(np.median(new) / np.median(base) - 1)
    idx = rng.integers(0, len(base), size=(1000, len(base)))
    boots = np.median(new[idx], axis=1) / np.median(base[idx], axis=1) - 1
    lo, hi = (float(x) for x in np.quantile(boots, [0.025, 0.975]))
    return {"rel_diff": point, "ci_low": lo, "ci_high": hi, "significant": not lo <= 0 <= hi}


def analyse(
    folder: Path,
    real: Path | None = None,
    figures: Path | None = None,
    root: Path | None = None,
) -> Section:
    """The simulated benchmark in `folder`; real CPU rows from `real` (default: its sibling
    `epd_real/`) when they exist; with `figures`, the chart of EPD's paired changes."""
    s = Section("epd", TITLE, QUESTION)
    summary_path, records_path = folder / "summary.json", folder / "records.jsonl"
    if not summary_path.is_file() or not records_path.is_file():
        s.answer = f"No records at {folder}: run `python -m agentic_kvc.epd.bench --out {folder}`"
        return s
    summary = json.loads(summary_path.read_text())
    recs = list(read_jsonl(records_path))
    s.note(
        "Method: step-level simulation (src/agentic_kvc/epd/sim.py) of Qwen2.5-VL-3B: LM from "
        "the H100 operator table (A100 derived by roofline ratios), vision encoder from its "
        "`vit_block` rows; default runs the encoder inside the engine step that admits the "
        "request; EPD encodes on a separate E device, preallocates PD encoder-cache space "
        "(16,384 tokens) one step after the announcement, moves data at 2 GB/s and schedules "
        "one PD iteration after arrival. VisionArena-like mix, all prompts at t=0, 3 runs (seeds) "
        "per load; both modes see the same requests, so intervals pair by request. E on its own "
        "device favours EPD (theirs shared one A100); see docs/epd.md for the limits."
    )
    header = ["GPU", "prompts", "mode", "req/s", "out tok/s", "TTFT mean / med / p99 (ms)"]
    header += ["TPOT mean / med / p99 (ms)", "ITL mean / med / p99 (ms)"]
    rows = []
    for r in summary:
        trios = [
            " / ".join(f"{r[f'{q}_{k}_ms']:.0f}" for q in ("mean", "median", "p99"))
            for k in ("ttft", "tpot", "itl")
        ]
        head = [r["hardware"], str(r["prompts"]), r["mode"], f"{r['req_per_s']:.2f}"]
        rows.append([*head, f"{r['out_tok_per_s']:.0f}", *trios])
    s.table("Ours (simulated; means over 3 runs):", header, rows)
    by = {(r["hardware"], r["prompts"], r["mode"]): r for r in summary}
    diffs, chart = [], []
    for hw, n in sorted({(r["hardware"], r["prompts"]) for r in summary}):
        pairs: dict[str, list[float]] = {"tpot_default": [], "tpot_epd": []}
        ttft: dict[str, list[float]] = {"default": [], "epd": []}
        key = {
            (x["run"], x["req_id"], x["mode"]): x
            for x in recs
            if (x["hardware"], x["prompts"]) == (hw, n)
        }
        for (run, rid, mode), x in key.items():
            if mode == "default" and (run, rid, "epd") in key:
                y = key[(run, rid, "epd")]
                pairs["tpot_default"].append(x["tpot_s"])
                pairs["tpot_epd"].append(y["tpot_s"])
                ttft["default"].append(x["ttft_s"])
                ttft["epd"].append(y["ttft_s"])
        tp = paired_median_rel(np.array(pairs["tpot_default"]), np.array(pairs["tpot_epd"]))
        tt = paired_median_rel(np.array(ttft["default"]), np.array(ttft["epd"]))
        thr = by[(hw, n, "epd")]["req_per_s"] / by[(hw, n, "default")]["req_per_s"] - 1
        diffs.append([hw, str(n), fmt_diff(tp), fmt_diff(tt), f"{thr * 100:+.1f}%"])
        for what, d in (("TPOT", tp), ("TTFT", tt)):
            chart.append((f"{hw}, {n} prompts: median {what}", *(d[k] * 100 for k in KEYS)))
        s.findings.append(
            f"epd, {hw}, {n} prompts: EPD vs default median TPOT {fmt_diff(tp)}, median TTFT "
            f"{fmt_diff(tt)} (paired by request)"
        )
    s.table(
        "EPD vs default (relative change, 95% paired bootstrap interval over requests):",
        ["GPU", "prompts", "median TPOT", "median TTFT", "req/s (mean of runs)"],
        diffs,
    )
    fig = (
        interval_chart(
            chart,
            figures / "epd_vs_default.svg",
            "EPD against default, paired by request (95% interval)",
            "change of the median (%)",
        )
        if figures is not None
        else None
    )
    if fig is not None:
        s.figure(fig, "EPD against default: median TPOT and TTFT per GPU and load.", root)
    worst_tpot = max(float(d[2].split("%")[0]) for d in diffs)
    lower_everywhere = all(not d[2].endswith("n.s.") and worst_tpot < 0 for d in diffs)
    verdict = "yes" if lower_everywhere else "not at every load"
    s.answer = (
        f"In this model, {verdict}: the smallest median-TPOT change of EPD vs default is "
        f"{worst_tpot:+.1f}% (steps no longer include the encoder); see the TTFT column for its "
        "cost. The size of the TPOT gain follows from the separate E device (method note)."
    )
    add_real(s, real if real is not None else folder.parent / "epd_real")
    theirs = [
        [
            str(n),
            mode,
            f"{v['median_tpot_ms']:.1f}",
            f"{v['median_ttft_ms']:.0f}",
            f"{v['req_per_s']:.2f}",
        ]
        for (mode, n), v in sorted(PUBLISHED.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]
    s.theirs = (
        "**Theirs** (the EPD design document, seed 001: Qwen2.5-VL-3B, one A100-SXM4-80GB "
        "shared by E and PD, VisionArena-Chat, vLLM benchmark_serving, means of 3 runs; "
        "for orientation, not targets): median TPOT >= 30% better at every load, ~5% more "
        "request throughput at 1,000 prompts, TTFT sometimes worse.\n\n"
        + md_table(["prompts", "mode", "median TPOT (ms)", "median TTFT (ms)", "req/s"], theirs)
    )
    return s


def add_real(s: Section, folder: Path) -> None:
    """ "Real CPU" rows (agentic_kvc.epd.real), when its records exist: not in the default
    pipeline (four engines, about 5 min of both cores); `snakemake epd_real` makes them."""
    summary_path, records_path = folder / "summary.json", folder / "records.jsonl"
    if not summary_path.is_file() or not records_path.is_file():
        s.note(
            "Real CPU rows: not in this run (four vLLM engines, about 5 min of both cores); "
            "`snakemake epd_real` or `python -m agentic_kvc.epd.real --out results/epd_real`."
        )
        return
    summary = json.loads(summary_path.read_text())
    recs = [r for r in read_jsonl(records_path) if "error" not in r]
    host = summary["host_load"]
    rows = []
    for r in summary["rows"]:
        win = host.get(f"r{r['repeat']}-{r['mode']}") or {}
        load1 = (win.get("load1") or {}).get("mean")
        busy = (win.get("overall") or {}).get("busy")
        rows.append(
            [
                "real CPU",
                str(r["repeat"]),
                r["mode"],
                f"{r['req_s']:.2f}",
                f"{r['out_tok_s']:.0f}",
                f"{r['median_ttft_ms']:.0f}",
                f"{r['median_tpot_ms']:.1f}",
                f"{r['p99_itl_ms']:.0f}",
                "-" if load1 is None else f"{load1:.1f}",
                "-" if busy is None else f"{busy * 100:.0f}%",
            ]
        )
    s.table(
        f"Real CPU (vLLM 0.32 CPU, tiny BLIP-2 with random weights, {summary['prompts']} "
        f"prompts at t=0 per run, {summary['max_tokens']} output tokens each, runs interleaved; "
        "default = two ordinary instances, EPD = E + PD via Redis; one core each):",
        [
            "setup",
            "repeat",
            "mode",
            "req/s",
            "out tok/s",
            "med TTFT (ms)",
            "med TPOT (ms)",
            "p99 ITL (ms)",
            "host load1",
            "host busy",
        ],
        rows,
    )
    key = {(r["mode"], r["repeat"], r["index"]): r for r in recs}
    pairs = [(x, key[("epd", rep, i)]) for (m, rep, i), x in key.items() if m == "default"]
    pairs = [(x, y) for x, y in pairs if y is not None]
    if len(pairs) < 4:
        return
    for metric in ("tpot_s", "ttft_s"):
        d = paired_median_rel(
            np.array([x[metric] for x, _ in pairs]), np.array([y[metric] for _, y in pairs])
        )
        s.findings.append(
            f"epd, real CPU: EPD vs default median {metric[:-2].upper()} {fmt_diff(d)} "
            f"(paired by image over {len(pairs)} requests, "
            f"{summary['repeats']} interleaved runs per mode)"
        )
