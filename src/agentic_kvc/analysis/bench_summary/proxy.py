"""Summaries of the request path's benchmarks: the routing decision and block hashing, the
proxy's added latency against vLLM-router, and its own CPU time by prompt length."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    NOT_MEASURED,
    Fig,
    LayoutError,
    field_at,
    num,
    signed,
    summariser,
    verdict_of,
)


@summariser("policy_decision", "routing decision and block hashing, 100k-token request")
def _policy_decision(doc: dict[str, Any]) -> list[Fig]:
    targets = doc.get("targets", {})
    limit_us = float(targets.get("decision_median_us", 200))
    limit_ms = float(targets.get("hash_100k_ms", 5))
    decisions = {k: v for k, v in field_at(doc, "decision").items() if not k.startswith("_")}
    if not decisions:
        raise LayoutError("decision: no policy measured")
    worst = max(sorted(decisions), key=lambda k: field_at(decisions, k, "median_us"))
    worst_us = float(decisions[worst]["median_us"])
    best = min(float(field_at(v, "median_us")) for v in decisions.values())
    n = doc.get("setup", {}).get("instances", "?")
    hash_ms = float(field_at(doc, "hashing", "hash_100k_numpy", "median_us")) / 1000
    turn = field_at(doc, "hashing", "hash_next_turn_102k_reusing_100k")
    setup = doc.get("setup", {})
    shared = int(setup.get("prompt_tokens", 100_000)) // int(setup.get("block_size", 16))
    reused = int(field_at(turn, "blocks_reused"))
    return [
        Fig(
            f"decision median, slowest of {len(decisions)} policies ({n} instances)",
            f"{num(worst_us)} us ({worst}; fastest {num(best)} us)",
            f"< {num(limit_us)} us",
            verdict_of(worst_us < limit_us),
        ),
        Fig(
            "hash 100k tokens into blocks (numpy input), median",
            f"{num(hash_ms)} ms",
            f"< {num(limit_ms)} ms",
            verdict_of(hash_ms < limit_ms),
        ),
        Fig(
            "next turn (+2k tokens) reuses the previous turn's block hashes",
            f"{reused:,} of {shared:,} blocks in {num(float(field_at(turn, 'median_us')))} us",
            f"all {shared:,}",
            verdict_of(reused == shared),
        ),
    ]


PROXY_TARGET = "akvc:unified"
PROXY_GOAL_MS = {"p50": 1.0, "p99": 2.0}
PEER_ROUTER = "vllm-router:"  # its targets in the file, one per policy


@summariser("proxy_overhead", "latency a router adds over direct requests to real vLLM")
def _proxy_overhead(doc: dict[str, Any]) -> list[Fig]:
    results = field_at(doc, "results")
    out = []
    request = doc.get("parameters", {}).get("request")
    if isinstance(request, str):  # (files since 2026-12-02 say what each request was)
        out.append(Fig("request", request))
    stream = results.get(PROXY_TARGET, {}).get("stream")
    for q, limit in PROXY_GOAL_MS.items():
        measure = f"{PROXY_TARGET.replace(':', ' ')}, streaming: added {q}"
        if stream is None:
            out.append(Fig(measure, "-", f"<= {num(limit)} ms", NOT_MEASURED))
            continue
        added = float(field_at(stream, f"added_{q}_ms"))
        ci = stream.get(f"added_{q}_ci95_ms")
        interval = f" [{num(ci[0])}, {num(ci[1])}]" if ci else ""
        out.append(
            Fig(
                measure,
                f"{signed(added)} ms{interval}",
                f"<= {num(limit)} ms",
                verdict_of(added <= limit),
            )
        )
    peers = [t for t in results if t.startswith(PEER_ROUTER)]
    ours = results.get(PROXY_TARGET, {})
    for mode, label in (("stream", "streaming"), ("nonstream", "not streaming")):
        if mode not in ours or not peers:
            continue
        # The standing goal: no more added latency than vllm-router, in the same run (its
        # targets interleaved with ours), against its fastest policy there; with the
        # difference's interval where the benchmark computed it (since 2026-12-02).
        best = min(peers, key=lambda t: float(field_at(results, t, mode, "added_p50_ms")))
        gap = float(field_at(ours, mode, "added_p50_ms")) - float(
            field_at(results, best, mode, "added_p50_ms")
        )
        ci = ours[mode].get("vs_peer_p50_ms", {}).get(best, {}).get("ci95")
        interval = f" [{signed(ci[0])}, {signed(ci[1])}]" if ci else ""
        out.append(
            Fig(
                f"{PROXY_TARGET.replace(':', ' ')} minus {best.replace(':', ' ')} (the faster "
                f"vllm-router here), {label}: added p50",
                f"{signed(gap)} ms{interval}",
                "<= 0 ms",
                verdict_of(gap <= 0),
            )
        )
    for mode, label in (("stream", "streaming"), ("nonstream", "not streaming")):
        before = ours.get(mode, {})
        if "vs_base_p50_ms" in before:  # `--baseline-src`: this code against another checkout
            ci = before.get("vs_base_p50_ci95_ms")
            interval = f" [{signed(ci[0])}, {signed(ci[1])}]" if ci else ""
            commit = str(doc.get("baseline_commit") or "?")[:7]
            out.append(
                Fig(
                    f"{PROXY_TARGET.replace(':', ' ')} minus the same at {commit} "
                    f"(akvc@base), {label}: p50",
                    f"{signed(float(before['vs_base_p50_ms']))} ms{interval}",
                )
            )
    for target in sorted(t for t in results if t not in (PROXY_TARGET, "direct")):
        s = field_at(results, target, "stream")
        p50, p99 = float(field_at(s, "added_p50_ms")), float(field_at(s, "added_p99_ms"))
        out.append(
            Fig(
                f"{target.replace(':', ' ')}, streaming: added p50 / p99",
                f"{signed(p50)} / {signed(p99)} ms",
            )
        )
    if "direct" in results:
        d = field_at(results, "direct", "stream")
        out.append(
            Fig(
                "direct to the engine, streaming: p50 / p99 (the baseline)",
                f"{num(float(field_at(d, 'p50_ms')))} / {num(float(field_at(d, 'p99_ms')))} ms",
            )
        )
    return out


@summariser("proxy_request_path", "the proxy's own CPU time per request, by prompt length")
def _proxy_request_path(doc: dict[str, Any]) -> list[Fig]:
    cells: dict[tuple[str, int], dict[str, float]] = {}
    chat: dict[int, dict[str, float]] = {}  # rendered tokens -> token memo on/off -> p50
    for row in field_at(doc, "results"):
        p50 = float(field_at(row, "p50_ms"))
        if row.get("prompt") == "chat":
            chat.setdefault(int(field_at(row, "prompt_tokens")), {})[
                str(field_at(row, "token_memo"))
            ] = p50
            continue
        key = (str(field_at(row, "policy")), int(field_at(row, "prompt_tokens")))
        cells.setdefault(key, {})[str(field_at(row, "mode"))] = p50
    out = []
    for policy in sorted({p for p, _ in cells}):
        lengths = sorted(n for p, n in cells if p == policy)
        for n in sorted({lengths[0], lengths[-1]}):
            modes = cells[(policy, n)]
            value = " / ".join(
                num(modes[m]) if m in modes else "-" for m in ("session", "sessionless")
            )
            out.append(
                Fig(f"{policy}: p50 at {n:,} tokens (session turn / sessionless)", value + " ms")
            )
    for n, memo in sorted(chat.items()):
        value = " / ".join(num(memo[m]) if m in memo else "-" for m in ("on", "off"))
        label = f"chat, a session's next turn at {n:,} tokens: p50 (token memo on / off)"
        out.append(Fig(label, value + " ms"))
    return out
