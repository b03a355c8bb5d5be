"""`calibrated_split`: split prefill and decode only when a fitted cost model says it pays.

Peer routers split on a fixed uncached-token threshold (256 in one, 2,048 in another;
`conditional_disagg` is that rule). This policy predicts both TTFTs from measured costs and
splits only when the colocated one exceeds the split one by a margin:

    colocated = prefill(D.pending_prefill + new_on_D)
    split     = prefill(P.pending_prefill + uncached_on_P)            # queue on P + its prefill
              + transfer_alpha + transfer_beta * new_on_D * kv_bytes_per_token  # incremental pull
              + ms_per_token * D.pending_prefill                       # D's queue, after the pull
              + split_fixed_ms                                         # D's promotion, hops
    split iff colocated > split * (1 + margin_ratio) + margin_ms

D's queue is on both sides: a request whose KV arrives from P still waits behind the prefills
queued on D (its scheduler admits requests in order). A first form left it out of the split
side, so it split whenever D had a queue and lost to the peers on 6 of 7 workloads
(benchmarks/policy_split.py); the split now pays only where P computes less (it holds more of
the prompt, or D's decode load made D the cheaper decode home) by more than the transfer.

with prefill(t) = prefill_alpha_ms + prefill_ms_per_token * t. D is chosen as in
`conditional_disagg` (Dynamo's KV cost); P is the least-pending other prefill instance. The
model's numbers are parameters naming where they come from (`calibration_source`): the
lifecycle microbenchmark's `calibration.json` for real engines (`params_from_calibration`), or
the simulator's own profile and transfer settings (`params_from_sim`) for simulated runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import Decision, FleetView, NoHealthyInstance, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.conditional_disagg import decode_by_kv_cost
from agentic_kvc.policy.registry import register


class CalibratedSplitParams(StrictParams):
    calibration_source: str = Field(
        "sim defaults: h20 / qwen3-coder-30b-a3b profile, sim.kv_transfer_fixed_s 0.05, "
        "kv_transfer_gbps 200",
        description="Where the numbers below come from (a run folder or a profile).",
    )
    transfer_alpha_ms: float = Field(50.0, ge=0, description="Fixed cost of one transfer.")
    transfer_beta_ms_per_byte: float = Field(
        4e-8, ge=0, description="Transfer time per byte (1 / bandwidth)."
    )
    kv_bytes_per_token: float = Field(98_304, gt=0, description="KV bytes per token, all layers.")
    prefill_alpha_ms: float = Field(0.0, ge=0, description="Fixed cost of a prefill.")
    prefill_ms_per_token: float = Field(0.12, gt=0, description="Prefill cost per token.")
    split_fixed_ms: float = Field(
        0.0, ge=0, description="Other split-only costs: D's promotion and first step, hops."
    )
    margin_ratio: float = Field(0.1, ge=0, description="Split only when it wins by this share")
    margin_ms: float = Field(0.0, ge=0, description="... and by this many ms.")


def predict_ttft_ms(
    p: CalibratedSplitParams,
    new_on_d: int,
    uncached_on_p: int,
    d_pending: int,
    p_pending: int,
) -> tuple[float, float]:
    """(colocated, split) predicted TTFT in ms."""
    colo = p.prefill_alpha_ms + p.prefill_ms_per_token * (d_pending + new_on_d)
    split = (
        p.prefill_alpha_ms
        + p.prefill_ms_per_token * (p_pending + uncached_on_p)
        + p.transfer_alpha_ms
        + p.transfer_beta_ms_per_byte * new_on_d * p.kv_bytes_per_token
        + p.prefill_ms_per_token * d_pending
        + p.split_fixed_ms
    )
    return colo, split


def should_split(p: CalibratedSplitParams, colo_ms: float, split_ms: float) -> bool:
    return colo_ms > split_ms * (1 + p.margin_ratio) + p.margin_ms


def break_even_new_tokens(p: CalibratedSplitParams, cached_on_p_share: float = 1.0) -> float:
    """Idle fleet: the new-token count above which the decider splits (inf: never).

    With P holding the same prefix as D (`cached_on_p_share` 1) both prefills cost the same,
    so splitting never pays on an idle fleet unless P holds more; the break-even comes from
    queues, which is why the decider reads them."""
    # colo = a + k n ; split = a + k n / share + ta + tb n + f  (P computes n / share tokens)
    k, a = p.prefill_ms_per_token, p.prefill_alpha_ms
    lhs = k - (1 + p.margin_ratio) * (
        k / cached_on_p_share + p.transfer_beta_ms_per_byte * p.kv_bytes_per_token
    )
    rhs = (1 + p.margin_ratio) * (a + p.transfer_alpha_ms + p.split_fixed_ms) + p.margin_ms - a
    return rhs / lhs if lhs > 0 else math.inf


def read_calibration(path: str | Path, *required: str) -> dict[str, Any]:
    """A lifecycle `calibration.json` (akvc lifecycle run) with the transfer fit and the
    `required` fields present (a fit left None: too few distinct sizes)."""
    cal = json.loads(Path(path).read_text())
    need = ("transfer_alpha_ms", "transfer_beta_ms_per_byte", *required)
    missing = [k for k in need if cal.get(k) is None]
    if missing:
        raise ValueError(f"{path}: calibration lacks {missing} (too few distinct sizes?)")
    return cal


def params_from_calibration(path: str | Path, **overrides: Any) -> dict[str, Any]:
    """Policy params from a lifecycle `calibration.json` (akvc lifecycle run)."""
    cal = read_calibration(path, "colo_ttft_ms_per_token")
    out = {
        "calibration_source": f"{cal.get('source', path)} (lifecycle calibration.json)",
        "transfer_alpha_ms": max(cal["transfer_alpha_ms"], 0.0),
        "transfer_beta_ms_per_byte": max(cal["transfer_beta_ms_per_byte"], 0.0),
        "kv_bytes_per_token": cal.get("kv_bytes_per_token") or 1024,
        "prefill_alpha_ms": max(cal.get("colo_ttft_alpha_ms") or 0.0, 0.0),
        "prefill_ms_per_token": max(cal["colo_ttft_ms_per_token"], 1e-6),
    }
    out.update(overrides)
    return out


def params_from_sim(
    hardware: str, model: str, kv_transfer_fixed_s: float, kv_transfer_gbps: float
) -> dict[str, Any]:
    """Policy params from the simulator's own profile and transfer settings."""
    from agentic_kvc.profiles import get_profile

    prof = get_profile(hardware, model)
    chunk = 8192
    per_tok_ms = prof.cost.step_s([(chunk, 0)], 0, 0) / chunk * 1e3
    return {
        "calibration_source": f"sim profile {hardware}/{model} ({prof.source}); "
        f"sim.kv_transfer_fixed_s {kv_transfer_fixed_s}, kv_transfer_gbps {kv_transfer_gbps}",
        "transfer_alpha_ms": kv_transfer_fixed_s * 1e3,
        "transfer_beta_ms_per_byte": 1e3 * 8 / (kv_transfer_gbps * 1e9),
        "kv_bytes_per_token": prof.kv_bytes_per_token,
        "prefill_ms_per_token": per_tok_ms,
    }


@register
class CalibratedSplit(ColocatingPolicy):
    name = "calibrated_split"
    Params = CalibratedSplitParams
    description = (
        "Pick decode by KV cost; split prefill to the least-pending peer only when the fitted "
        "cost model predicts a lower TTFT by a margin (lifecycle microbenchmark)."
    )

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        p: CalibratedSplitParams = self.params  # type: ignore[assignment]
        n = len(fleet.instances)
        d, cached, cost = decode_by_kv_cost(self.name, self.tie, request, fleet)
        others = [i for i in fleet.prefill_candidates() if i.index != d.index]
        new_d = max(request.input_tokens - cached[d.index], 0)
        scores: dict[int, Any] = {k: {"kv_cost": v} for k, v in cost.items()}
        if not others:
            if not d.can_prefill:
                raise NoHealthyInstance(f"{self.name}: no healthy instance can prefill")
            return self.decision(request, d, d, "no_prefill_peer", scores, cached)
        pre = argmin(others, lambda i: (i.pending_prefill_tokens, i.num_requests), self.tie, n)
        uncached_p = max(request.input_tokens - cached[pre.index], 0)
        colo, split = predict_ttft_ms(
            p, new_d, uncached_p, d.pending_prefill_tokens, pre.pending_prefill_tokens
        )
        scores[d.index].update(pred_colo_ms=round(colo, 3), pred_split_ms=round(split, 3))
        if not d.can_prefill or should_split(p, colo, split):
            return self.decision(request, pre, d, "split_pays", scores, cached)
        return self.decision(request, d, d, "colocate_cheaper", scores, cached)
