"""The engine cost model, below both `policy/` and `sim/` (../shared/ARCHITECTURE.md).

For now it holds the cost model a router fits online from the token streams it relays
(`online.py`); the profile tables and the step-cost contract still live in `sim/` (issue 31
item 4 moves them here). Nothing in this package imports from `policy/` or `sim/`.
"""

from agentic_kvc.profiles.online import (
    GENERIC_PRIOR,
    TERMS,
    OnlineAffineFit,
    StreamObserver,
    decode_features,
    ttft_features,
)

__all__ = [
    "GENERIC_PRIOR",
    "TERMS",
    "OnlineAffineFit",
    "StreamObserver",
    "decode_features",
    "ttft_features",
]
