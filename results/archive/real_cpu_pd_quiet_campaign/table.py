"""This campaign's per-run table and paired differences (README.md), from the runs' records.

    .venv/bin/python results/archive/real_cpu_pd_quiet_campaign/table.py RUNS_DIR

RUNS_DIR holds the nine run folders (e.g. a copy of this folder's three and the archive's six
adaptive v2 runs named in README.md). Paired over the repeat index with
`agentic_kvc.paired.paired_compare`, as the report's studies pair real repeats.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.real import host_load
from agentic_kvc.paired import paired_compare, request_frame

RR, REPIN, PINNED = "round_robin", "adaptive v2, re-pinned", "adaptive v2, vLLM's pinning"


def variant(cfg: dict) -> str:
    if cfg["policy"]["name"] == "round_robin":
        return RR
    pinned = (cfg["fleet"].get("vllm_env") or {}).get("AKVC_NIXL_REPIN") == "0"
    return PINNED if pinned else REPIN


def main(root: Path) -> None:
    rows, frames = [], []
    for d in sorted(p for p in root.iterdir() if (p / "requests.jsonl").exists()):
        cfg = json.loads((d / "config.json").read_text())
        man = json.loads((d / "manifest.json").read_text())
        recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x]
        v, rep = variant(cfg), cfg.get("repeat", 0)
        frames.append(
            request_frame(recs).with_columns(
                pl.lit(v).alias("variant"),
                pl.lit(rep).alias("repeat"),
                pl.lit(cfg["fleet"]["instances"]).alias("instances"),
            )
        )
        ok = [r for r in recs if not r.get("error")]
        ttft = sorted(r["ttft_s"] for r in ok)
        e2e = sorted(r["e2e_s"] for r in ok)
        hl = host_load(man)
        rows.append(
            (man["started_at"][11:19], d.name, v, rep, 1000 * ttft[len(ttft) // 2],
             e2e[len(e2e) // 2], len(recs) - len(ok), len(recs), hl)
        )  # fmt: skip
    print("| run | variant | repeat | start (UTC) | TTFT p50 | E2E p50 | failed | load1 "
          "| probe (ms): interpreter / memory |")  # fmt: skip
    print("|---|---|--:|---|--:|--:|--:|--:|--:|")
    for start, rid, v, rep, t, e, failed, n, hl in sorted(rows):
        print(
            f"| {rid} | {v} | {rep} | {start} | {t:.0f} ms | {e:.2f} s | {failed}/{n} "
            f"| {hl['load1']:.1f} | {hl['python_ms']} / {hl['memory_ms']} |"
        )
    df = pl.concat(frames, how="diagonal_relaxed")
    for base, cand in ((REPIN, PINNED), (RR, REPIN), (RR, PINNED)):
        for metric in ("ttft_p50", "e2e_p50"):
            r = paired_compare(df, base, cand, metric, pair_on=("repeat",))
            print(f"{cand} vs {base}, {metric}: {100 * r.rel_diff:+.1f}% "
                  f"[{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}]")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
