"""The simulator's prefix cache replayed over a hash-id trace, one request after another.

For cross-checking against `kvcache-simulator` (PyPI), which computes LRU prefix-hit rates for
Mooncake-format traces: requests are served one at a time in file order; each looks up its
longest cached prefix, then its missing blocks are inserted (evicting least recently used
free blocks), then it finishes and its blocks become free again. The cache here is the
simulator's own `BlockPool`, exactly as an instance uses it; only the driving is sequential.

Block identity follows the trace: block j of a request is identified by its whole chain of
hash ids up to j (a trie node), and holds `block_size` tokens except the last one of a
request, which holds what is left of `input_length` (kvcache-simulator's convention; the
engine itself never caches a partial block, which is why this check drives the pool directly).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.sim.blocks import BlockPool, BlockTable, HashesOf


@dataclass(slots=True)
class ChainTrace:
    nodes: list[list[int]]  # per request: trie node id of each block
    tokens: list[list[int]]  # per request: tokens in each block


def read_hash_trace(path: Path, block_size: int) -> ChainTrace:
    """Mooncake-format JSONL (hash_ids, input_length) as chained block identities."""
    edges: dict[tuple[int, int], int] = {}
    nodes: list[list[int]] = []
    tokens: list[list[int]] = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ids = [int(h) for h in rec["hash_ids"]]
                length = int(rec["input_length"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a hash-id trace record: {exc}") from None
            if not ids or length <= 0:
                raise ValueError(f"{path}:{lineno}: needs hash_ids and a positive input_length")
            parent, chain, toks = 0, [], []
            for j, h in enumerate(ids):
                node = edges.setdefault((parent, h), len(edges) + 1)
                chain.append(node)
                toks.append(max(1, min(block_size, length - j * block_size)))
                parent = node
            nodes.append(chain)
            tokens.append(toks)
    return ChainTrace(nodes, tokens)


def _slicer(chain: list[int]) -> HashesOf:
    return lambda lo, hi: chain[lo:hi]


def lru_hit_rate(trace: ChainTrace, capacity_blocks: int, warmup_fraction: float = 0.5) -> dict:
    """Prefix-hit token rate over the requests after the warm-up fraction."""
    pool = BlockPool(capacity_blocks, 1)
    warmup = int(len(trace.nodes) * warmup_fraction)
    hit_tokens = total_tokens = 0
    for i, (chain, toks) in enumerate(zip(trace.nodes, trace.tokens, strict=True)):
        hit = pool.lookup(chain)
        if i >= warmup:
            total_tokens += sum(toks)
            hit_tokens += sum(toks[: hit.n])
        table = BlockTable()
        if hit.n:
            pool.take(table, hit)
        n_new = min(len(chain) - hit.n, pool.num_free)  # a request longer than the cache
        pool.allocate(table, n_new)
        pool.cache(table, hit.n + n_new, _slicer(chain))
        pool.release(table)
    return {
        "capacity_blocks": capacity_blocks,
        "hit_tokens": hit_tokens,
        "total_tokens": total_tokens,
        "hit_rate": hit_tokens / total_tokens if total_tokens else 0.0,
        "evictions": pool.evictions,
    }
