"""Summaries of the simulator's benchmarks: its cache and queueing against references, its
speed and scale, and its fidelity to repeated real vLLM runs."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    NOT_MEASURED,
    NOT_MET,
    Fig,
    field_at,
    num,
    pct,
    summariser,
    tolerance_pct,
    verdict_of,
)
from agentic_kvc.analysis.envelope import METRIC_NAMES, against_perfect_model


@summariser("sim_cache_check", "simulator's LRU prefix-hit rate against kvcache-simulator")
def _sim_cache_check(doc: dict[str, Any]) -> list[Fig]:
    tol = float(doc.get("parameters", {}).get("tolerance_points", 1.0))
    rows = field_at(doc, "results")
    if not rows:
        return [Fig("hit rate at any budget", "-", f"within {num(tol)} point", NOT_MEASURED)]
    out = []
    for row in sorted(rows, key=lambda r: float(field_at(r, "gib"))):
        ours, theirs = (
            float(field_at(row, "sim_hit_rate")),
            float(field_at(row, "kvcache_simulator_hit_rate")),
        )
        diff = 100 * (ours - theirs)
        out.append(
            Fig(
                f"hit rate at {num(float(row['gib']))} GiB "
                f"({int(field_at(row, 'cache_blocks')):,} blocks)",
                f"{pct(ours)} vs {pct(theirs)} ({diff:+.2f} points)",
                f"within {num(tol)} point",
                verdict_of(abs(diff) < tol),
            )
        )
    return out


@summariser("sim_mdl", "simulated queueing delay against the M/D/1 formula")
def _sim_mdl(doc: dict[str, Any]) -> list[Fig]:
    tol = float(doc.get("parameters", {}).get("tolerance", 0.05))
    out = []
    for row in sorted(field_at(doc, "results"), key=lambda r: float(field_at(r, "load"))):
        sim, mdl = float(field_at(row, "wq_sim_s")), float(field_at(row, "wq_mdl_s"))
        rel = sim / mdl - 1
        out.append(
            Fig(
                f"mean queueing delay at load {num(float(row['load']))}",
                f"{num(sim)} s vs M/D/1 {num(mdl)} s ({pct(rel, sign=True)})",
                f"within {tolerance_pct(tol)}",
                verdict_of(abs(rel) < tol),
            )
        )
    return out


SIM_SPEED_GOAL = 1000.0
SIM_SPEED_GOAL_SCENARIO = "default"
SIM_SPEED_DEFAULT_SESSIONS = 16  # config/runs/sim_agentic.yaml's own session count


@summariser("sim_speed", "simulated seconds per wall second, 8 instances, one core")
def _sim_speed(doc: dict[str, Any]) -> list[Fig]:
    goal = float(doc.get("parameters", {}).get("goal_speedup", SIM_SPEED_GOAL))
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for row in field_at(doc, "results"):
        by_scenario.setdefault(str(field_at(row, "scenario")), []).append(row)
    out = []
    if SIM_SPEED_GOAL_SCENARIO not in by_scenario:
        out.append(Fig("default workload: speedup", "-", f">= {num(goal)}x", NOT_MEASURED))
    for scenario in sorted(by_scenario, key=lambda s: (s != SIM_SPEED_GOAL_SCENARIO, s)):
        rows = by_scenario[scenario]
        if scenario == SIM_SPEED_GOAL_SCENARIO:
            # The default workload is the 16-session config; larger counts are for scale.
            rows = [
                r for r in rows if r.get("sessions_asked") == SIM_SPEED_DEFAULT_SESSIONS
            ] or rows
        done = [r for r in rows if "speedup" in r]
        failed = len(rows) - len(done)
        if done:
            slow = min(done, key=lambda r: float(r["speedup"]))
            value = (
                f"{num(float(slow['speedup']))}x "
                f"({slow.get('policy', '?')}, {slow.get('sessions', '?')} sessions)"
            )
            speed: float | None = float(slow["speedup"])
        else:
            value, speed = "-", None
        if failed:
            value += f"; {failed} of {len(rows)} did not run"
        if scenario == SIM_SPEED_GOAL_SCENARIO:
            ok = None if speed is None else speed >= goal and not failed
            out.append(
                Fig(
                    f"{scenario} workload: slowest speedup",
                    value,
                    f">= {num(goal)}x",
                    verdict_of(ok),
                )
            )
        else:
            out.append(Fig(f"{scenario}: slowest speedup", value))
    return out


SCALE_GOALS = {  # issue 16
    "long_context_8_speedup": 5000.0,
    "speedup_128": 200.0,
    "big_run_wall_s": 600.0,
    "big_run_rss_mb": 4096.0,
}


@summariser("sim_scale", "simulator at fleet scale, 8 to 1,024 instances on one core")
def _sim_scale(doc: dict[str, Any]) -> list[Fig]:
    goals = {**SCALE_GOALS, **doc.get("goals", {})}
    rows = field_at(doc, "results")

    def at(n: int, preset: str | None = None) -> tuple[list[dict[str, Any]], int]:
        """The completed points at n instances (of one preset), and how many did not complete."""
        sel = [r for r in rows if field_at(r, "instances") == n]
        sel = [r for r in sel if preset is None or r.get("preset") == preset]
        done = [r for r in sel if "wall_s" in r and r.get("speedup") is not None]
        return done, len(sel) - len(done)

    def speed_fig(measure: str, n: int, preset: str | None, goal: float) -> Fig:
        done, missing = at(n, preset)
        if not done and not missing:
            return Fig(measure, "-", f">= {num(goal)}x", NOT_MEASURED)
        if missing:
            return Fig(measure, f"{missing} run(s) did not complete", f">= {num(goal)}x", NOT_MET)
        slow = min(done, key=lambda r: float(r["speedup"]))
        speed = float(slow["speedup"])
        reps = [float(v) for v in slow.get("repeat_speedups") or []]
        spread = f"; median of {len(reps)} runs, {num(min(reps))}-{num(max(reps))}x" if reps else ""
        return Fig(
            measure,
            f"{num(speed)}x ({slow.get('preset', '?')}, {slow.get('policy', '?')}{spread})",
            f">= {num(goal)}x",
            verdict_of(speed >= goal),
        )

    big_n = 1024
    done, missing = at(big_n)
    wall_goal, rss_goal = goals["big_run_wall_s"], goals["big_run_rss_mb"]
    wall_fig = Fig(
        f"{big_n:,} instances: slowest run, start to end",
        "-",
        f"< {num(wall_goal / 60)} min",
        NOT_MEASURED,
    )
    rss_fig = Fig(
        f"{big_n:,} instances: peak RSS", "-", f"< {num(rss_goal / 1024)} GB", NOT_MEASURED
    )
    if missing:
        wall_fig = Fig(
            wall_fig.measure, f"{missing} run(s) did not complete", wall_fig.goal, NOT_MET
        )
    if done:
        # The whole run (the subprocess: generation and simulation), as the goal reads.
        slow = max(done, key=lambda r: float(r.get("process_s", r["wall_s"])))
        wall = float(slow.get("process_s", slow["wall_s"]))
        if not missing:
            wall_fig = Fig(
                wall_fig.measure,
                f"{num(wall / 60)} min ({int(slow.get('sessions', 0)):,} sessions, "
                f"{slow.get('preset', '?')}, {slow.get('policy', '?')})",
                wall_fig.goal,
                verdict_of(wall < wall_goal),
            )
        rss = max(float(field_at(r, "peak_rss_mb")) for r in done)
        # Runs that did not complete leave the peak unknown unless the others already exceed it.
        rss_ok = False if rss >= rss_goal else None if missing else True
        rss_fig = Fig(
            rss_fig.measure,
            f"{num(rss / 1024)} GB"
            + (f" ({len(done)} of {len(done) + missing} runs)" if missing else ""),
            rss_fig.goal,
            verdict_of(rss_ok),
        )
    return [
        speed_fig(
            "8 instances, long-context preset: slowest speedup",
            8,
            "long_context",
            goals["long_context_8_speedup"],
        ),
        speed_fig("128 instances: slowest speedup", 128, None, goals["speedup_128"]),
        wall_fig,
        rss_fig,
    ]


SIM_VS_VLLM_METRICS = METRIC_NAMES


def _against_perfect_model(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The session's checks against a model with no error (analysis/envelope.py): stored by
    the benchmark, or computed from its cases' real runs (older files); None without them."""
    if doc.get("against_perfect_model"):
        return dict(doc["against_perfect_model"])
    cases = doc.get("cases") or []
    for c in cases:
        runs = c.get("vllm_runs") or []
        if len(runs) < 2 or not all(m in r for r in runs for m in SIM_VS_VLLM_METRICS):
            return None
        if not all("pass" in m for m in (c.get("metrics") or {}).values()):
            return None
    return against_perfect_model(cases) if cases else None


@summariser("sim_vs_vllm", "simulator against repeated real vLLM CPU runs")
def _sim_vs_vllm(doc: dict[str, Any]) -> list[Fig]:
    out = []
    if doc.get("neighbours"):  # `--neighbours N`: a known neighbour load beside each real run
        out.append(Fig("processes spinning a core beside each real run", str(doc["neighbours"])))
    for case in sorted(field_at(doc, "cases"), key=lambda c: int(field_at(c, "instances"))):
        n = int(case["instances"])
        label = f"{n} instance{'s' if n != 1 else ''}"
        tol = case.get("mean_tolerance")
        metrics = field_at(case, "metrics")
        inside, passed, errors = 0, 0, []
        for name in SIM_VS_VLLM_METRICS:
            m = field_at(metrics, name)
            sim, lo, hi = (
                float(field_at(m, "sim")),
                float(field_at(m, "real_min")),
                float(field_at(m, "real_max")),
            )
            err = sim / float(field_at(m, "real_mean")) - 1
            errors.append(err)
            in_range = lo <= sim <= hi
            inside += in_range
            passed += in_range and (tol is None or abs(err) <= float(tol))
        repeats = len(case.get("vllm_runs", []))
        goal = "all inside the real min..max"
        if tol is not None:
            goal += f", within {tolerance_pct(float(tol))} of the mean"
        # Simulated beside the real runs' measured neighbours (runnable threads of others).
        background = float((case.get("sim") or {}).get("background_threads") or 0.0)
        on = f"; simulated beside {background:.2f} runnable threads of other processes"
        on = on if background else ""
        out.append(
            Fig(
                f"{label}: TTFT/E2E p50/p90 inside the real runs' range ({repeats} repeats)",
                f"{inside} of {len(SIM_VS_VLLM_METRICS)}; error to the real mean "
                f"{pct(min(errors), sign=True)} .. {pct(max(errors), sign=True)}{on}",
                goal,
                verdict_of(passed == len(SIM_VS_VLLM_METRICS)),
            )
        )
        hits = field_at(case, "prefix_hits")
        sim_hits, counters = field_at(hits, "sim_records"), list(field_at(hits, "vllm_counters"))
        same = sum(c == sim_hits for c in counters)
        out.append(
            Fig(
                f"{label}: prefix-hit tokens, simulator vs vLLM's counters",
                f"{int(sim_hits):,}; equal in {same} of {len(counters)} repeats",
                "exact",
                verdict_of(bool(counters) and same == len(counters)),
            )
        )
    bar = _against_perfect_model(doc)
    if bar is not None:
        perfect = bar["perfect_model"]
        out.append(
            Fig(
                "all sizes: checks in the envelope, simulator vs a model with no error",
                f"{bar['passed']} of {bar['checks']}; a model with no error "
                f"{perfect['expected']:.1f} on average, all {bar['checks']} with probability "
                f"{pct(perfect['all'])} (the repeats' own scatter)",
                f">= {perfect['p05']:.0f} (what a model with no error passes in 95% of sessions)",
                verdict_of(bool(bar["met"])),
            )
        )
    return out
