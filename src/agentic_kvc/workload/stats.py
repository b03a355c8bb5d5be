"""Workload statistics: sizes, sessions, arrival rate, and reuse with an unlimited cache.

"Unlimited cache" means every prompt ever seen stays cached: a request's hit is the longest
token prefix it shares with any earlier request (in arrival order), under the block model of
`model.py` (a block cached in part serves only the part). That is the reuse the workload
itself offers; what a real fleet gets is lower (eviction, routing). Route classes follow the
adaptive-offload design: HEAVY when new tokens >= 20k, else WARM when the hit is over 50% of
the prompt or new tokens < 5k, else MEDIUM.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentic_kvc.workload.model import Request, Workload

HEAVY_NEW_TOKENS = 20_000
WARM_HIT_FRACTION = 0.5
WARM_NEW_TOKENS = 5_000
HIGH_HIT_FRACTION = 0.9


def unlimited_cache_hits(requests: list[Request]) -> list[int]:
    """Hit tokens of each request (in the given order) against all earlier prompts.

    A trie over content blocks: a node is (parent node, block id, tokens). A block held in full
    by an earlier prompt is walked through; one held only in part (or longer) ends the walk,
    serving min(tokens) of it, because after it the token sequences differ.
    """
    child: dict[tuple[int, int, int], int] = {}
    longest: dict[tuple[int, int], int] = {}  # (node, block id) -> most tokens of it seen
    hits = []
    for req in requests:
        node, hit = -1, 0
        walking = True
        for b in req.blocks:
            key = (node, b.id, b.tokens)
            nxt = child.get(key)
            if walking:
                if nxt is not None:
                    hit += b.tokens
                else:
                    hit += min(b.tokens, longest.get((node, b.id), 0))
                    walking = False
            if nxt is None:
                nxt = child[key] = len(child)
            pk = (node, b.id)
            if longest.get(pk, 0) < b.tokens:
                longest[pk] = b.tokens
            node = nxt
        hits.append(hit)
    return hits


def block_ceiling_hits(requests: list[Request], block_size: int) -> list[int]:
    """The most cached tokens an engine with an infinite cache could report for each request.

    vLLM caches and matches whole blocks of `block_size` tokens only, and always computes the
    last prompt token (a hit is at most `input - 1` tokens), so a request's ceiling is its
    unlimited-cache hit rounded down to a block, capped at `(input - 1) // block_size` blocks.
    Generated tokens never count: the next turn's copy of an answer is new content.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    hits = unlimited_cache_hits(requests)
    return [
        min(h // block_size, max(r.input_tokens - 1, 0) // block_size) * block_size
        for r, h in zip(requests, hits, strict=True)
    ]


def hit_rate_ceiling(workload_or_requests: Workload | list[Request], block_size: int) -> float:
    """Token-weighted hit-rate ceiling: sum of `block_ceiling_hits` / sum of input tokens.

    The same definition as a run's measured `prefix_hit_rate` (cached input tokens / input
    tokens), so the two can stand side by side. A workload's requests are taken in arrival
    order, a list in its own order.
    """
    reqs = (
        workload_or_requests.requests()
        if isinstance(workload_or_requests, Workload)
        else workload_or_requests
    )
    total = sum(r.input_tokens for r in reqs)
    return sum(block_ceiling_hits(reqs, block_size)) / total if total else 0.0


def _dist(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "mean": float(values.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(values.max()),
    }


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if len(mask) else 0.0


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else 0.0


def route_class(input_tokens: int, new_tokens: int) -> str:
    if new_tokens >= HEAVY_NEW_TOKENS:
        return "HEAVY"
    hit = input_tokens - new_tokens
    if new_tokens < WARM_NEW_TOKENS or (input_tokens and hit > WARM_HIT_FRACTION * input_tokens):
        return "WARM"
    return "MEDIUM"


def workload_stats(workload: Workload) -> dict[str, Any]:
    """All the numbers `akvc workload stats` prints, as a JSON-able dict."""
    reqs = workload.requests()
    n = len(reqs)
    inp = np.array([r.input_tokens for r in reqs], dtype=np.float64)
    out = np.array([r.output_tokens for r in reqs], dtype=np.float64)
    hits = np.array(unlimited_cache_hits(reqs), dtype=np.float64)
    new = inp - hits
    first = np.array([r.parent_id is None and r.turn == 0 for r in reqs], dtype=bool)
    frac = np.divide(hits, inp, out=np.zeros_like(hits), where=inp > 0)
    classes = np.array([route_class(int(i), int(k)) for i, k in zip(inp, new, strict=True)])
    arrivals = np.array([r.arrival_s for r in reqs], dtype=np.float64)
    duration = float(arrivals.max() - arrivals.min()) if n else 0.0
    turns = np.array([len(s.requests) for s in workload.sessions], dtype=np.float64)
    thinks = np.array([r.think_s for r in reqs if not (r.parent_id is None and r.turn == 0)])
    high = frac > HIGH_HIT_FRACTION
    heavy = classes == "HEAVY"
    return {
        "requests": n,
        "sessions": len(workload.sessions),
        "turns_per_session": _dist(turns),
        "input_tokens": _dist(inp),
        "output_tokens": _dist(out),
        "duration_s": duration,
        "arrival_rate_per_s": (n - 1) / duration if duration > 0 else 0.0,
        "first_turn_share": _share(first),  # cold starts: a session's first request
        "continuation_share": _share(~first),  # continues an earlier request
        "first_turn_new_tokens_mean": _mean(new[first]),
        "continuation_new_tokens_mean": _mean(new[~first]),
        "new_tokens": _dist(new),
        "prefix_hit_share_of_input_tokens": float(hits.sum() / inp.sum()) if inp.sum() else 0.0,
        "requests_with_any_hit_share": _share(hits > 0),
        "high_hit_share": _share(high),  # hit > 90% of the prompt
        "high_hit_new_tokens_mean": _mean(new[high]),
        "classes": {
            c: {"share": _share(classes == c), "new_tokens_mean": _mean(new[classes == c])}
            for c in ("WARM", "MEDIUM", "HEAVY")
        },
        "heavy_first_turn_share": _share(first[heavy]) if heavy.any() else 0.0,
        "think_s": _dist(thinks),
        "meta": {k: v for k, v in workload.meta.items() if k != "generator"},
    }
