"""Workloads: the canonical session/request model, trace readers, the generator, token synthesis.

Entry points: `load_workload` (what runs call), `read_workload` / `write_native` (files),
`synthesize` (the agentic generator), `request_token_ids` / `request_text` /
`engine_block_hashes` (what a prompt looks like to an engine), `workload_stats`,
`workload_for` / `hit_rate_ceiling_for` (a run's workload and its infinite-cache hit rate).
"""

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import FORMATS, detect_format, read_workload, write_native
from agentic_kvc.workload.generator import PRESETS, synthesize
from agentic_kvc.workload.load import hit_rate_ceiling_for, load_workload, workload_for
from agentic_kvc.workload.model import Block, Request, Session, Workload
from agentic_kvc.workload.stats import block_ceiling_hits, hit_rate_ceiling, workload_stats
from agentic_kvc.workload.tokens import engine_block_hashes, request_text, request_token_ids
from agentic_kvc.workload.transform import apply_transforms

__all__ = [
    "FORMATS",
    "PRESETS",
    "Block",
    "Request",
    "Session",
    "Workload",
    "WorkloadFormatError",
    "apply_transforms",
    "block_ceiling_hits",
    "detect_format",
    "engine_block_hashes",
    "hit_rate_ceiling",
    "hit_rate_ceiling_for",
    "load_workload",
    "read_workload",
    "request_text",
    "request_token_ids",
    "synthesize",
    "workload_for",
    "workload_stats",
    "write_native",
]
