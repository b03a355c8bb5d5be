"""Prefix-cache views: block hashing, the estimated index, the exact index from KV events."""

from agentic_kvc.cache.hashing import SessionBlockHasher, block_hashes, workload_tokens
from agentic_kvc.cache.prefix_index import BlockIndex, EstimatedPrefixIndex, ExactPrefixIndex

__all__ = [
    "BlockIndex",
    "EstimatedPrefixIndex",
    "ExactPrefixIndex",
    "SessionBlockHasher",
    "block_hashes",
    "workload_tokens",
]
