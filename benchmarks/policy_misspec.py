"""Model-based routing with a cost model wrong in known ways (issue 31 item 1), and the fix.

Every model-based policy runs the robustness sweep's held-out workloads
(benchmarks/policy_robustness.py: same scenarios, seeds, trace windows, per-run cache under
--work, best peer = lowest pooled TTFT p90 among the peers) with its model correct (the
scenario's own profile and transfer settings: the "oracle" the sweep gives it) and wrong:

- predicted_ttft: another GPU's profile (H100 on an H20 fleet, H20 on an H100 one); each
  affine coefficient x0.5 and x2 (`cost_scale`); all five 2x off in alternating directions
  (`2x`: overhead, per token ... x2, x0.5, x2, x0.5, x2; a uniform scale would change no
  decision); the token budget B x0.5 and x2;
- its split form (`split: true`): another GPU's profile; the transfer bandwidth x0.25 and x4
  (a stale link measurement);
- calibrated_split: prefill ms per token x0.5 / x2, transfer time per byte x4 / x0.25;
- additive (its constants are not fitted to anything; default 0.05 s decode iteration and
  7,000 prefill tokens/s): each x0.5 and x2;
- predicted_ttft with the cost model fitted online from the streams (`cost_model: online`,
  profiles/online.py), started from the `2x` profile, from the other GPU's, and from a
  generic prior (no profile).

Each variant is paired (agentic_kvc.paired, 95% two-level bootstrap over seeds and requests) with
the best peer and with its own correctly specified form on TTFT p90 and E2E p90. The online
goal (issue 31): within 10% of the oracle's TTFT p90 after the first `--warmup` requests of
each run, and never significantly worse than the best peer.

Variant labels: `policy@what is wrong` (`@gpu`: the other GPU's profile, H100 on an H20
fleet and H20 on an H100 one); no brackets, which polars would read as a glob in a cached
run's path.

Default (about 10 minutes of one core, the peers included when not cached): 6 held-out
workloads x 3 seeds. Full sweep: --scenarios held_out --seeds 5.

    flock /tmp/akvc_cpu.lock .venv/bin/python benchmarks/policy_misspec.py \\
        --out results/bench/policy_misspec.json --md results/bench/policy_misspec.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.paired import paired_compare
from agentic_kvc.policy.calibrated_split import params_from_sim

# The sweep's machinery, imported by name from this folder (also when this script is loaded by
# path, as workflow/scripts/sweep_batch.py does): one module object however it is reached.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import policy_robustness as rb

DEFAULT = "chat,heavy_tail,short_ctx,high_reuse,long_fleet16,h100_qwen"
TERMS = ("overhead_s", "per_token_s", "per_attn_pair_s", "per_decode_seq_s", "per_kv_token_s")
SHORT = {"overhead_s": "a", "per_token_s": "b", "per_attn_pair_s": "c"}
SHORT |= {"per_decode_seq_s": "d", "per_kv_token_s": "k"}
WRONG_2X = {t: f for t, f in zip(TERMS, (2.0, 0.5, 2.0, 0.5, 2.0), strict=True)}
PT, SPLIT, CAL, ADD = "predicted_ttft", "predicted_ttft:split=true", "calibrated_split", "additive"
ONLINE = "predicted_ttft:cost_model=online"


def flow(d: dict[str, float]) -> str:
    """A YAML flow mapping for a `--set` value."""
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def other_gpu(hardware: str) -> str:
    return "h100" if hardware != "h100" else "h20"


def variants(scenario: str) -> list[tuple[str, str, str, list[str]]]:
    """(label, family oracle, policy spec, extra overrides) of every variant on `scenario`;
    a family's oracle has the label of its policy spec and no extra overrides."""
    _, base, sets = rb.SCENARIOS[scenario]
    cfg = load_config(rb.REPO / base, [*sets, *rb.replicate_sets(base, 0)])
    fl, sim = cfg.fleet, cfg.sim
    gpu = f"policy.params.hardware={other_gpu(fl.hardware)}"
    scale = "policy.params.cost_scale="
    out: list[tuple[str, str, str, list[str]]] = [(PT, PT, PT, [])]
    out.append((f"{PT}@gpu", PT, PT, [gpu]))
    for t in TERMS:
        for f in (0.5, 2.0):
            out.append((f"{PT}@{SHORT[t]}x{f:g}", PT, PT, [scale + flow({t: f})]))
    out.append((f"{PT}@2x", PT, PT, [scale + flow(WRONG_2X)]))
    budget = "policy.params.max_num_batched_tokens="
    for f in (0.5, 2.0):
        b = int(fl.max_num_batched_tokens * f)
        out.append((f"{PT}@Bx{f:g}", PT, PT, [f"{budget}{b}"]))
    out.append((f"{PT}@online-2x", PT, ONLINE, [scale + flow(WRONG_2X)]))
    out.append((f"{PT}@online-gpu", PT, ONLINE, [gpu]))
    out.append((f"{PT}@online-generic", PT, ONLINE, ["policy.params.online_prior=generic"]))
    out.append((SPLIT, SPLIT, SPLIT, []))
    out.append((f"{SPLIT}@gpu", SPLIT, SPLIT, [gpu]))
    for f in (0.25, 4.0):
        gbps = sim.kv_transfer_gbps * f
        out.append((f"{SPLIT}@gbpsx{f:g}", SPLIT, SPLIT, [f"policy.params.transfer_gbps={gbps}"]))
    cal = params_from_sim(fl.hardware, fl.model, sim.kv_transfer_fixed_s, sim.kv_transfer_gbps)
    out.append((CAL, CAL, CAL, []))
    for key, tag, factors in (
        ("prefill_ms_per_token", "prefill", (0.5, 2.0)),
        ("transfer_beta_ms_per_byte", "beta", (4.0, 0.25)),
    ):
        for f in factors:
            value = cal[key] * f
            out.append((f"{CAL}@{tag}x{f:g}", CAL, CAL, [f"policy.params.{key}={value}"]))
    out.append((ADD, ADD, ADD, []))
    for key, tag, default in (
        ("decode_iteration_s", "decode", 0.05),
        ("prefill_throughput", "prefill", 7000.0),
    ):
        for f in (0.5, 2.0):
            out.append((f"{ADD}@{tag}x{f:g}", ADD, ADD, [f"policy.params.{key}={default * f}"]))
    return out


def after_warmup(df: pl.DataFrame, warmup: int) -> pl.DataFrame:
    """Each run's requests after its first `warmup` (records are in arrival order)."""
    k = pl.int_range(pl.len()).over(["policy", "seed"])
    return df.with_columns(k.alias("_k")).filter(pl.col("_k") >= warmup).drop("_k")


def analyse(scenario: str, df: pl.DataFrame, var: list[tuple], warmup: int) -> dict:
    peers = [p for p in rb.PEERS if p in set(df["policy"])]
    ttft = {p: rb.p90(df.filter(pl.col("policy") == p), "ttft_s") for p in df["policy"].unique()}
    best = min(peers, key=lambda p: ttft[p])
    out: dict = {
        "scenario": scenario,
        "group": rb.SCENARIOS[scenario][0],
        "best_peer": best,
        "ttft_p90": ttft,
        "variants": {},
    }
    late = after_warmup(df, warmup)
    for label, oracle, _spec, _sets in var:
        row: dict = {"family": oracle}
        row["vs_peer"] = {
            m: paired_compare(df, best, label, m, by="policy").to_row()
            for m in ("ttft_p90", "e2e_p90")
        }
        if label != oracle:
            row["vs_oracle"] = {
                m: paired_compare(df, oracle, label, m, by="policy").to_row()
                for m in ("ttft_p90", "e2e_p90")
            }
        if "online" in label:  # the goal is stated after a warm-up
            row["vs_oracle_after_warmup"] = _late(late, oracle, label)
            row["vs_peer_after_warmup"] = _late(late, best, label)
        out["variants"][label] = row
    return out


def _late(late: pl.DataFrame, base: str, label: str) -> dict | None:
    """TTFT p90 paired after the warm-up; None where no run is longer than the warm-up."""
    try:
        return paired_compare(late, base, label, "ttft_p90", by="policy").to_row()
    except ValueError:
        return None


def worse(r: dict) -> bool:
    """Significantly worse on TTFT p90 or E2E p90 (interval above 0)."""
    return any(r[m]["ci_low"] > 0 for m in ("ttft_p90", "e2e_p90"))


def summary(results: list[dict]) -> dict:
    """Per variant: scenarios where it is significantly worse than the best peer, and than
    its own correct form; its median TTFT p90 difference to each."""
    labels = list(dict.fromkeys(k for r in results for k in r["variants"]))
    out = {}
    for label in labels:
        rows = [r["variants"][label] for r in results if label in r["variants"]]
        peer = [r["vs_peer"]["ttft_p90"]["rel_diff"] for r in rows]
        orac = [r["vs_oracle"]["ttft_p90"]["rel_diff"] for r in rows if "vs_oracle" in r]
        s: dict = {
            "family": rows[0]["family"],
            "scenarios": len(rows),
            "worse_than_peer": [
                r["scenario"]
                for r in results
                if label in r["variants"] and worse(r["variants"][label]["vs_peer"])
            ],
            "median_ttft_p90_vs_peer": _median(peer),
        }
        if orac:
            s["worse_than_oracle"] = [
                r["scenario"]
                for r in results
                if label in r["variants"] and worse(r["variants"][label]["vs_oracle"])
            ]
            s["median_ttft_p90_vs_oracle"] = _median(orac)
        if "online" in label:
            late = [r["vs_oracle_after_warmup"] for r in rows if r["vs_oracle_after_warmup"]]
            s["after_warmup_ttft_p90_vs_oracle"] = {
                r["scenario"]: (r["variants"][label]["vs_oracle_after_warmup"] or {}).get(
                    "rel_diff"
                )
                for r in results
                if label in r["variants"]
            }
            s["goal_within_10pct_of_oracle"] = all(x["rel_diff"] <= 0.10 for x in late)
            s["goal_never_worse_than_peer"] = not s["worse_than_peer"]
        out[label] = s
    return out


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def cell(r: dict) -> str:
    s = f"{100 * r['rel_diff']:+.1f}% [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
    return f"**{s}**" if r["ci_low"] > 0 else s


def markdown(results: list[dict], summ: dict) -> str:
    names = [r["scenario"] for r in results]
    head = ["variant", "worse than best peer", "worse than own oracle", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, s in summ.items():
        row = [
            f"`{label}`",
            f"{len(s['worse_than_peer'])}/{s['scenarios']}",
            f"{len(s['worse_than_oracle'])}/{s['scenarios']}" if "worse_than_oracle" in s else "-",
        ]
        for r in results:
            v = r["variants"].get(label)
            row.append(cell(v["vs_peer"]["ttft_p90"]) if v else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(
        "Cells: TTFT p90 vs the best peer ("
        + ", ".join(
            f"{r['scenario']}: {r['best_peer']} {r['ttft_p90'][r['best_peer']]:.2f} s"
            for r in results
        )
        + "); **bold**: significantly worse."
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenarios", default=DEFAULT, help="comma list, or 'held_out', 'final'")
    ap.add_argument("--seeds", type=int, default=3, help="replicates per variant (sweep: 5)")
    ap.add_argument("--families", default="all", help="comma list of family oracles, or all")
    ap.add_argument("--warmup", type=int, default=200, help="online goal: requests skipped")
    ap.add_argument("--work", type=Path, default=rb.REPO / "results" / "robustness")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    a = ap.parse_args()
    if a.scenarios in ("held_out", "final", "tune"):
        names = [k for k, v in rb.SCENARIOS.items() if v[0] == a.scenarios]
    else:
        names = a.scenarios.split(",")
    unknown = [n for n in names if n not in rb.SCENARIOS]
    if unknown:
        ap.error(f"--scenarios: unknown {unknown}; policy_robustness.py --list names them")
    results = []
    t_all = time.perf_counter()
    for sc in names:
        t0 = time.perf_counter()
        var = variants(sc)
        if a.families != "all":
            keep = set(a.families.split(","))
            var = [v for v in var if v[1] in keep]
        seeds = range(rb.REPLICATES.get(sc, a.seeds))
        frames = [rb.run_one(sc, p, s, a.work) for p in rb.PEERS for s in seeds]
        frames += [
            rb.run_one(sc, spec, s, a.work, sets, label)
            for label, _o, spec, sets in var
            for s in seeds
        ]
        df = pl.concat(frames, how="vertical_relaxed")
        res = analyse(sc, df, var, a.warmup)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(f"{sc}: best peer {res['best_peer']}, {res['wall_s']} s", flush=True)
    summ = summary(results)
    md = markdown(results, summ)
    print(md)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": "policy_misspec",
            "seeds": a.seeds,
            "warmup": a.warmup,
            "peers": list(rb.PEERS),
            "wall_s": round(time.perf_counter() - t_all, 1),
            "summary": summ,
            "scenarios": results,
        }
        a.out.write_text(json.dumps(doc, indent=1))
    rb.write_md(a.md, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
