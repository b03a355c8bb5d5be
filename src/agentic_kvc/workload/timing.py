"""Nominal release times for closed-loop turns, so that `arrival_s` stays meaningful.

A closed-loop trace (or the generator) knows a later turn's think/tool wait, not when the
previous turn finished: that depends on the server. To give every request an open-loop
arrival time as well, a turn is released `think_s` after the previous turn would finish on a
nominal server (prefill of its whole prompt, then decode). The rates are deliberately round
numbers of a mid-size model on one modern GPU; closed-loop replay ignores them.
"""

from __future__ import annotations

from agentic_kvc.workload.model import Request

NOMINAL_PREFILL_TOKENS_PER_S = 10_000.0
NOMINAL_DECODE_TOKENS_PER_S = 50.0


def nominal_service_s(req: Request) -> float:
    return (
        req.input_tokens / NOMINAL_PREFILL_TOKENS_PER_S
        + req.output_tokens / NOMINAL_DECODE_TOKENS_PER_S
    )


def release_after(prev: Request, think_s: float) -> float:
    """Open-loop arrival of the turn after `prev`: its nominal finish plus the wait."""
    return prev.arrival_s + nominal_service_s(prev) + think_s
