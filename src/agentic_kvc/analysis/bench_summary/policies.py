"""Summaries of the policy sweeps: our policies against the best peer on every workload, and
predicted_ttft with split candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    NOT_MEASURED,
    Fig,
    LayoutError,
    above_zero,
    below_zero,
    field_at,
    paired_cell,
    pct,
    summariser,
    verdict_of,
)

ROBUST_METRICS = ("ttft_p90", "e2e_p90")  # what the robustness sweep pairs
# The robustness sweep's predicted_ttft with its step costs fitted online from a generic prior
# (benchmarks/policy_robustness.py OURS): the form a fleet without a profile runs.
ROBUST_ONLINE = "predicted_ttft:cost_model=online,online_prior=generic"


def robust_metric(m: str) -> str:
    """'ttft_p90' -> 'TTFT p90'."""
    name, _, q = m.partition("_")
    return f"{name.upper()} {q}"


def robust_worse(rows: Sequence[Mapping[str, Any]], policy: str) -> list[tuple[str, list[str]]]:
    """The robustness sweep's workloads where `policy` is significantly worse than the best
    peer (the interval above 0), each with the metrics where it is, by name."""
    out = []
    for r in rows:
        worse = [m for m in ROBUST_METRICS if above_zero(field_at(r, policy, m))]
        if worse:
            out.append((str(r["scenario"]), worse))
    return sorted(out)


def robust_lead(rows: Sequence[Mapping[str, Any]], policy: str) -> Mapping[str, Any] | None:
    """The workload of `policy`'s largest significant TTFT p90 lead over the best peer among
    those where its E2E p90 is not significantly worse (None without one)."""
    leads = [
        r
        for r in rows
        if below_zero(field_at(r, policy, "ttft_p90"))
        and not above_zero(field_at(r, policy, "e2e_p90"))
    ]
    return min(leads, key=lambda r: float(r[policy]["ttft_p90"]["rel_diff"]), default=None)


def robust_vs_default(
    rows: Sequence[Mapping[str, Any]], variant: str
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(workload, metric, paired row) where the variant differs significantly from its
    policy's default form (each scenario's `vs_default`; the interval excludes 0)."""
    out = []
    for r in rows:
        for m in ROBUST_METRICS:
            c = field_at(r, "vs_default", variant, m)
            if above_zero(c) or below_zero(c):
                out.append((str(r["scenario"]), m, c))
    return out


@summariser("policy_robustness", "our policies against the best peer on every workload (sim)")
def _policy_robustness(doc: dict[str, Any]) -> list[Fig]:
    scenarios = field_at(doc, "scenarios")
    out = []
    for o in field_at(doc, "ours"):
        rows = [r for r in scenarios if o in r]
        worse = robust_worse(rows, o)
        listed = ", ".join(f"{n} ({', '.join(map(robust_metric, ms))})" for n, ms in worse)
        out.append(
            Fig(
                f"{o}: workloads significantly worse than the best peer (TTFT or E2E p90)",
                f"{len(worse)} of {len(rows)}" + (f": {listed}" if worse else ""),
                "none (issue 18)",
                verdict_of(bool(rows) and not worse),
            )
        )
        best = robust_lead(rows, o)
        lead = None if best is None else float(best[o]["ttft_p90"]["rel_diff"])
        out.append(
            Fig(
                f"{o}: largest significant TTFT p90 lead, E2E p90 not significantly worse",
                "none" if best is None else f"{pct(lead, sign=True)} ({best['scenario']})",
                ">= 20% lower on one workload (issue 18)",
                verdict_of(lead is not None and lead <= -0.2),
            )
        )
        paired = [r for r in rows if o in r.get("vs_default", {})]
        if paired:
            diff = robust_vs_default(paired, o)
            listed = "; ".join(f"{n} {robust_metric(m)} {paired_cell(c)}" for n, m, c in diff)
            out.append(
                Fig(
                    f"{o} vs {o.partition(':')[0]} (its default form): workloads where they "
                    "differ significantly (TTFT or E2E p90)",
                    f"{len({n for n, _, _ in diff})} of {len(paired)}"
                    + (f": {listed}" if diff else ""),
                )
            )
    return out


@summariser("policy_split", "predicted_ttft with split candidates (sim, issue 18 item 4)")
def _policy_split(doc: dict[str, Any]) -> list[Fig]:
    rows = field_at(doc, "scenarios")
    out = []
    # (what split is paired against, where each scenario keeps that pair's intervals)
    against = (
        ("colocate-only predicted_ttft", ("split_vs_colo",), "none (else split stays off)"),
        ("the best peer", ("vs_peer", "predicted_ttft:split=true"), "none (issue 18)"),
    )
    for label, path, goal in against:
        worse = sorted(
            str(r["scenario"])
            for r in rows
            if any(float(field_at(r, *path, m, "ci_low")) > 0 for m in ("ttft_p90", "e2e_p90"))
        )
        better = sorted(
            (float(field_at(r, *path, "ttft_p90", "rel_diff")), str(r["scenario"]))
            for r in rows
            if float(field_at(r, *path, "ttft_p90", "ci_high")) < 0
        )
        out.append(
            Fig(
                f"split vs {label}: workloads significantly worse (TTFT or E2E p90)",
                f"{len(worse)} of {len(rows)}" + (f": {', '.join(worse)}" if worse else ""),
                goal,
                verdict_of(bool(rows) and not worse),
            )
        )
        out.append(
            Fig(
                f"split vs {label}: significantly lower TTFT p90",
                ", ".join(f"{b} {pct(v, sign=True)}" for v, b in better) or "none",
            )
        )
    return out


# --- field_pathologies: failure modes users report of public routers (docs/policies.md,
# "Field-reported failure modes, reproduced": the predictions registered before the runs) ---
PATHOLOGY_OURS = "predicted_ttft"
# Prediction 1: these put at least twice the fair share of requests on their busiest instance
# when a shared system prompt outweighs the sessions' own prompts; the others at most that.
COLLAPSERS = ("sglang_cache_aware", "llmd_weighted")
SPREADERS = ("predicted_ttft", "dynamo_kv", "least_loaded", "consistent_hash")
SPIRAL_FACTOR = 10.0  # prediction 3: consistent hashing preempts at least this many times more


def pathology_predictions(
    kind: str, policies: Mapping[str, Mapping[str, Any]], fair: float
) -> list[dict[str, Any]]:
    """The registered predictions for one scenario of `kind` ("collapse" or "spiral"), each
    {prediction, claim, holds}, judged from the per-policy numbers (`policies`, as
    benchmarks/field_pathologies.py writes them; `fair`: one instance's fair share)."""
    out: list[dict[str, Any]] = []

    def add(pid: str, claim: str, holds: bool) -> None:
        out.append({"prediction": pid, "claim": claim, "holds": bool(holds)})

    if kind == "collapse":
        for p in (*COLLAPSERS, *SPREADERS):
            if p in policies:
                share = float(policies[p]["busiest_request_share"])
                collapses = p in COLLAPSERS
                sign = ">=" if collapses else "<="
                ok = share >= 2 * fair if collapses else share <= 2 * fair
                add("1", f"{p} busiest share {share:.2f} (predicted {sign} {2 * fair:.2f})", ok)
        c = policies.get("sglang_cache_aware", {}).get("vs_ours", {}).get("ttft_p90")
        if c is not None:
            claim = f"sglang_cache_aware TTFT p90 {paired_cell(c)} (predicted significantly higher)"
            add("2", claim, above_zero(c))
    elif kind == "spiral":
        ch, ours = policies.get("consistent_hash"), policies.get(PATHOLOGY_OURS)
        if ch is not None and ours is not None:
            n_ch, n_ours = int(ch["preemptions"]), int(ours["preemptions"])
            add(
                "3",
                f"consistent_hash preemptions {n_ch} vs {n_ours} (predicted >= {SPIRAL_FACTOR:g}x)",
                n_ch >= SPIRAL_FACTOR * max(1, n_ours),
            )
            hit, ttft = field_at(ch, "vs_ours", "hit_rate"), field_at(ch, "vs_ours", "ttft_p90")
            add(
                "3",
                f"consistent_hash hit rate {paired_cell(hit)} (predicted lower)",
                below_zero(hit),
            )
            add(
                "3",
                f"consistent_hash TTFT p90 {paired_cell(ttft)} (predicted higher)",
                above_zero(ttft),
            )
    elif kind == "confirm":  # the confirmatory check: openings, the added peers, any peer
        for p in (*COLLAPSERS, PATHOLOGY_OURS):
            if p in policies:
                share = float(policies[p]["busiest_opening_share"])
                collapses = p in COLLAPSERS
                sign = ">=" if collapses else "<="
                ok = share >= 2 * fair if collapses else share <= 2 * fair
                add(
                    "1",
                    f"{p} busiest opening share {share:.2f} (predicted {sign} {2 * fair:.2f})",
                    ok,
                )
        if "production_stack_prefix" in policies:
            share = float(policies["production_stack_prefix"]["busiest_request_share"])
            add(
                "2",
                f"production_stack_prefix busiest share {share:.2f} (predicted >= 0.9)",
                share >= 0.9,
            )
        vs = policies.get("sglang_cache_aware", {}).get("vs_ours")
        if vs is not None:
            ttft, e2e = vs["ttft_p90"], vs["e2e_p90"]
            add(
                "3",
                f"sglang_cache_aware TTFT p90 {paired_cell(ttft)}, E2E p90 {paired_cell(e2e)} "
                "(predicted one significantly higher)",
                above_zero(ttft) or above_zero(e2e),
            )
        ahead = [
            f"{p} {robust_metric(m)} {paired_cell(s['vs_ours'][m])}"
            for p, s in policies.items()
            for m in ("ttft_p90", "e2e_p90")
            if "vs_ours" in s and below_zero(s["vs_ours"][m])
        ]
        add(
            "4",
            f"peers significantly ahead of {PATHOLOGY_OURS}: {'; '.join(ahead) or 'none'}",
            not ahead,
        )
    else:
        raise LayoutError(f"field_pathologies: unknown scenario kind {kind!r}")
    return out


@summariser(
    "field_pathologies",
    "failure modes users report of public routers, reproduced (sim, pre-registered)",
)
def _field_pathologies(doc: dict[str, Any]) -> list[Fig]:
    what = {
        "1": "collapse: busiest instance's share of requests (shared system prompt)",
        "2": "collapse costs latency: sglang_cache_aware's TTFT p90 above predicted_ttft's",
        "3": "spiral: consistent hashing preempts 10x as often as predicted_ttft, lower hit "
        "rate, higher TTFT p90",
    }
    return _pathology_rows(doc, what)


@summariser(
    "field_pathologies_confirm",
    "failure modes users report of public routers: a confirmatory check on three more "
    "deployments (sim, pre-registered)",
)
def _field_pathologies_confirm(doc: dict[str, Any]) -> list[Fig]:
    what = {
        "1": "collapse of session openings: sglang_cache_aware and llmd_weighted >= twice the "
        "fair share, predicted_ttft <= it",
        "2": "production_stack_prefix: >= 0.9 of the requests on one instance",
        "3": "the collapse costs latency: sglang_cache_aware's TTFT or E2E p90 above "
        "predicted_ttft's",
        "4": "predicted_ttft significantly behind no peer (TTFT or E2E p90)",
    }
    return _pathology_rows(doc, what)


def _pathology_rows(doc: dict[str, Any], what: Mapping[str, str]) -> list[Fig]:
    """Per registered prediction (`what`: its id -> the row's words), its claims on the
    held-out scenarios (the verdict) and on the explored ones (shown beside, judged alike);
    then the peers added after the registration, and where predicted_ttft trails a peer."""
    results = field_at(doc, "results")
    judged = [
        (r, pathology_predictions(str(r["kind"]), r["policies"], float(r["fair_share"])))
        for r in results
    ]
    out = []
    for pid, measure in what.items():
        held = [
            (str(r["scenario"]), p)
            for r, ps in judged
            if not r["explored_before_registration"]
            for p in ps
            if p["prediction"] == pid
        ]
        seen = [
            (str(r["scenario"]), p)
            for r, ps in judged
            if r["explored_before_registration"]
            for p in ps
            if p["prediction"] == pid
        ]
        if not held and not seen:
            continue
        failed = "; ".join(f"{s}: {p['claim']}" for s, p in held if not p["holds"])
        value = (
            f"{sum(p['holds'] for _, p in held)} of {len(held)} held-out claims hold"
            + (f" (not: {failed})" if failed else "")
            if held
            else "no held-out scenario in this file"
        )
        if seen:
            value += (
                f"; explored before registration: {sum(p['holds'] for _, p in seen)} of {len(seen)}"
            )
        out.append(
            Fig(
                measure,
                value,
                "every held-out claim (prediction registered in docs/policies.md)",
                verdict_of(all(p["holds"] for _, p in held)) if held else NOT_MEASURED,
            )
        )
    opens = [  # the first check's collapse scenarios (the confirmatory one judges openings)
        f"{r['scenario']} "
        + " / ".join(
            f"{r['policies'][p]['busiest_opening_share']:.2f}"
            for p in (*COLLAPSERS, PATHOLOGY_OURS)
            if p in r["policies"]
        )
        for r in results
        if r["kind"] == "collapse"
        and all("busiest_opening_share" in s for s in r["policies"].values())
    ]
    if opens:
        out.append(
            Fig(
                "busiest instance's share of session openings, "
                f"{' / '.join((*COLLAPSERS, PATHOLOGY_OURS))} (added after the registration)",
                "; ".join(opens),
            )
        )
    registered = {*COLLAPSERS, *SPREADERS, PATHOLOGY_OURS, "consistent_hash"}
    if any(r["kind"] == "confirm" for r in results):  # registered with all eight policies
        registered |= {p for r in results for p in r["policies"]}
    later = sorted({p for r in results for p in r["policies"]} - registered)
    for p in later:  # peers run after the registration: shown, judged by nothing
        rows = [r for r in results if p in r["policies"]]
        shares = [float(r["policies"][p]["busiest_request_share"]) for r in rows]
        ttft = sorted(float(r["policies"][p]["vs_ours"]["ttft_p90"]["rel_diff"]) for r in rows)
        out.append(
            Fig(
                f"{p} (added after the registration): busiest instance's share of requests; "
                f"TTFT p90 against {PATHOLOGY_OURS}",
                f"{min(shares):.2f}-{max(shares):.2f} over {len(rows)} scenarios; "
                f"{pct(ttft[0], sign=True)} to {pct(ttft[-1], sign=True)}",
            )
        )
    worse = []
    for r in results:
        for p, s in r["policies"].items():
            for m in ("ttft_p90", "e2e_p90"):
                c = s.get("vs_ours", {}).get(m)
                if c is not None and below_zero(c):  # the peer significantly below ours
                    worse.append(f"{r['scenario']} {robust_metric(m)} vs {p} {paired_cell(c)}")
    out.append(
        Fig(
            "predicted_ttft significantly behind a peer (TTFT or E2E p90), scenarios",
            f"{len({w.split()[0] for w in worse})} of {len(results)}"
            + (f": {'; '.join(worse)}" if worse else ""),
        )
    )
    return out


# --- field_pathologies_real: the collapse on real engines (docs/policies.md, "The collapse on
# real engines": the predictions registered before the runs) ---
REAL_COLLAPSE_MIN = 0.75  # sglang_cache_aware's busiest engine share, in every seed's run
REAL_SPREAD_MAX = 0.65  # predicted_ttft's, averaged over the seeds


def real_collapse_holds(runs: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """The registered thresholds on one backend's runs: whether they hold, and the shares."""
    share = {
        p: [float(r["busiest_request_share"]) for r in runs if r["policy"] == p]
        for p in ("sglang_cache_aware", PATHOLOGY_OURS)
    }
    mean = sum(share[PATHOLOGY_OURS]) / max(1, len(share[PATHOLOGY_OURS]))
    holds = (
        bool(share["sglang_cache_aware"])
        and min(share["sglang_cache_aware"]) >= REAL_COLLAPSE_MIN
        and bool(share[PATHOLOGY_OURS])
        and mean <= REAL_SPREAD_MAX
    )
    text = (
        f"sglang_cache_aware {', '.join(f'{x:.2f}' for x in share['sglang_cache_aware'])}; "
        f"{PATHOLOGY_OURS} {', '.join(f'{x:.2f}' for x in share[PATHOLOGY_OURS])} "
        f"(mean {mean:.2f})"
    )
    return holds, text


@summariser(
    "field_pathologies_real",
    "the shared-system-prompt collapse on real vLLM CPU engines, beside the simulator "
    "(pre-registered)",
)
def _field_pathologies_real(doc: dict[str, Any]) -> list[Fig]:
    backends = field_at(doc, "backends")
    out = []
    goal = (
        f"sglang_cache_aware >= {REAL_COLLAPSE_MIN} in every seed, {PATHOLOGY_OURS} mean <= "
        f"{REAL_SPREAD_MAX}"
    )
    names = {"vllm": "real engines", "sim": "simulator, same configs"}
    for backend, label in names.items():
        if backend not in backends:
            continue
        holds, text = real_collapse_holds(field_at(backends, backend, "runs"))
        n = "1" if backend == "vllm" else "2"
        out.append(
            Fig(
                f"{label}: busiest engine's share of requests per seed (prediction {n})",
                text,
                goal,
                verdict_of(holds),
            )
        )
    for backend, label in names.items():
        if backend not in backends:
            continue
        pairs = field_at(backends, backend, "sglang_cache_aware_vs_ours")
        # hit rate's count of differing requests covers placement and cached tokens: 0 means
        # both policies decided every request alike, and a latency difference is the spread
        alike = pairs.get("hit_rate", {}).get("n_differ") == 0
        out.append(
            Fig(
                f"{label}: sglang_cache_aware vs {PATHOLOGY_OURS}, TTFT p90 / E2E p90 (paired "
                "over seeds; no prediction)",
                ("every request placed alike, so this is the run-to-run spread: " if alike else "")
                + " / ".join(
                    paired_cell(pairs[m])
                    + ("" if above_zero(pairs[m]) or below_zero(pairs[m]) else " n.s.")
                    for m in ("ttft_p90", "e2e_p90")
                ),
            )
        )
    # each real run's 1-minute load over its replay ({mean, max}, `host_load` of its manifest)
    loads = [r["load1_replay"] for r in backends.get("vllm", {}).get("runs", [])]
    loads = [x for x in loads if x]
    if loads:
        means = [float(x["mean"]) for x in loads]
        out.append(
            Fig(
                "real runs: 1-minute load during the replays, mean per run (highest reading)",
                f"{min(means):.1f}-{max(means):.1f} ({max(float(x['max']) for x in loads):.1f})",
            )
        )
    return out
