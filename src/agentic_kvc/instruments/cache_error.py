"""Cache-view error: what each prefix-cache view predicts against what the engines hold.

At every decision of a simulated run, for every instance: the prompt tokens each view says
are cached there, and the truth, the instance's block pool at that moment (what vLLM's prefix
cache would reuse, capped at input - 1 tokens as vLLM caps it). Views:

- `estimated`: the router's own LRU guess (`EstimatedPrefixIndex`), sized to the engine's
  KV blocks and fed every routed prompt; the run's own index when the run uses it, else a
  shadow fed the same routes;
- `exact`: the engines' block tables as KV events report them (`ExactCacheView`); in the
  simulator that is the pool itself, so its error is zero by construction (a check of the
  plumbing, and the bar the estimate is measured against).

False-hit tokens = max(predicted - true, 0): the view believes in a prefix the engine evicted
(or never had); missed-hit tokens = max(true - predicted, 0). Each row carries the session's
idle gap (time since its previous request finished: the tool pause) and each instance's KV
usage, so the errors can be read against both. For a real run, `record_rows` compares the
router's prediction for the instance it chose with the engine-reported cached tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.config import RunConfig
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.policy.base import RequestView
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.sim.fleet import ExactCacheView, SessionRun, SimFleet
from agentic_kvc.workload.model import Workload
from agentic_kvc.workload.tokens import engine_block_hashes

VIEWS = ("estimated", "exact")
# Idle-gap (s) and KV-usage bins the summary reads errors against.
GAP_BINS = (0.0, 1.0, 5.0, 30.0, 120.0, float("inf"))
KV_BINS = (0.0, 0.5, 0.8, 0.95, 1.01)


class CacheErrorFleet(SimFleet):
    """A simulated run that measures every cache view at each decision (`rows`)."""

    probes_pools = True  # the exact view and KV usage, at each decision

    def __init__(self, config: RunConfig, workload: Workload, profile: EngineProfile) -> None:
        super().__init__(config, workload, profile)
        own = self.state.cache
        self.estimated = (
            own
            if isinstance(own, EstimatedPrefixIndex)
            else EstimatedPrefixIndex(config.fleet.instances, self.num_blocks)
        )
        self._shadow = self.estimated is not own
        self.exact = ExactCacheView(self.instances)
        self.rows: list[dict[str, Any]] = []
        self._last_done: dict[str, float] = {}

    def _request_done(self, srun: SessionRun, turn_index: int) -> None:
        self._last_done[srun.session.session_id] = self._now
        super()._request_done(srun, turn_index)

    def _release(self, srun: SessionRun, k: int) -> None:
        req = srun.session.requests[k]
        now = self._now
        n_before = len(self.records)
        hashes = engine_block_hashes(req, self.bs)
        view = RequestView(
            req.request_id, req.session_id, req.turn, req.input_tokens, 1, hashes, self.bs
        )
        n = len(self.instances)
        cap = max(req.input_tokens - 1, 0)
        self.estimated.advance(now)  # TTL, as the router's view() does before deciding
        predicted = {
            "estimated": [min(x, cap) for x in self.estimated.matched_tokens(view, n)],
            "exact": [min(x, cap) for x in self.exact.matched_tokens(view, n)],
        }
        truth = [min(i.pool.count_hit(hashes) * i.bs, cap) for i in self.instances]
        kv = [i.pool.usage for i in self.instances]
        last = self._last_done.get(req.session_id)
        super()._release(srun, k)
        if len(self.records) == n_before:
            return  # parked until its dependencies are done: measured when released
        rec = self.records[n_before]
        if self._shadow and rec.prefill_instance is not None:
            self.estimated.record(rec.prefill_instance, hashes, now)
            if rec.decode_instance is not None and rec.decode_instance != rec.prefill_instance:
                self.estimated.record(rec.decode_instance, hashes, now)
        self.rows.append(
            {
                "request_id": req.request_id,
                "session_id": req.session_id,
                "turn": req.turn,
                "t": now,
                "input_tokens": req.input_tokens,
                "idle_gap_s": None if last is None else now - last,
                "policy": rec.policy,
                "run_view": self.config.policy.cache_view,
                "chosen": rec.prefill_instance,
                "kv_usage": kv,
                "true_cached_tokens": truth,
                "predicted": predicted,
            }
        )


def run_cache_error(
    config: RunConfig, workload: Workload, profile: EngineProfile
) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
    fleet = CacheErrorFleet(config, workload, profile)
    fleet.run()
    return fleet.records, fleet.rows


def record_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Any run's records (real engines included): the view's prediction for the instance the
    router chose against the engine-reported cached tokens of the request that ran there."""
    last: dict[str, float] = {}
    out = []
    for r in sorted(records, key=lambda r: (r["arrival_s"], r["session_id"], r["turn"])):
        sid = r["session_id"]
        gap = None if sid not in last else r["arrival_s"] - last[sid]
        if r.get("t_done") is not None:
            last[sid] = max(last.get(sid, float("-inf")), r["t_done"])
        if r.get("error") or r.get("predicted_cached_tokens") is None:
            continue
        out.append(
            {
                "request_id": r["request_id"],
                "session_id": sid,
                "turn": r["turn"],
                "t": r["arrival_s"],
                "input_tokens": r["input_tokens"],
                "idle_gap_s": gap,
                "policy": r.get("policy", ""),
                "run_view": r.get("cache_view"),
                "chosen": 0,
                "kv_usage": [None],
                "true_cached_tokens": [r["cached_tokens"]],
                "predicted": {r.get("cache_view") or "estimated": [r["predicted_cached_tokens"]]},
            }
        )
    return out


def errors(row: dict[str, Any], view: str, chosen_only: bool = False) -> list[tuple[int, int]]:
    """(false-hit, missed-hit) tokens of `view` per instance (or the chosen one) in `row`."""
    pred = row["predicted"].get(view)
    if pred is None:
        return []
    idx = [row["chosen"]] if chosen_only and row["chosen"] is not None else range(len(pred))
    truth = row["true_cached_tokens"]
    return [(max(pred[i] - truth[i], 0), max(truth[i] - pred[i], 0)) for i in idx]


def _bin(x: float | None, edges: Sequence[float]) -> str | None:
    if x is None:
        return None
    for lo, hi in pairwise(edges):
        if lo <= x < hi:
            return f"[{lo:g}, {hi:g})"
    return None


def summarize(
    rows: Sequence[dict[str, Any]], by: str = "idle_gap_s", chosen_only: bool = False
) -> list[dict[str, Any]]:
    """Per view and bin of `by` (idle_gap_s, or kv_usage of each instance): pairs measured,
    mean false-hit and missed-hit tokens, and the share of pairs with a false hit."""
    acc: dict[tuple[str, str], list[tuple[int, int]]] = {}
    views = sorted({v for r in rows for v in r["predicted"]})
    for r in rows:
        for view in views:
            errs = errors(r, view, chosen_only)
            if by == "kv_usage":
                idx = [r["chosen"]] if chosen_only else range(len(errs))
                keys = [_bin(r["kv_usage"][i], KV_BINS) for i in idx]
            else:
                keys = [
                    _bin(r["idle_gap_s"], GAP_BINS) if r["idle_gap_s"] is not None else "first turn"
                ] * len(errs)
            for key, e in zip(keys, errs, strict=True):
                if key is not None:
                    acc.setdefault((view, key), []).append(e)
    out = []
    for (view, key), errs in sorted(acc.items()):
        arr = np.array(errs, dtype=float)
        out.append(
            {
                "view": view,
                "bin": key,
                "pairs": len(errs),
                "false_hit_tokens": float(arr[:, 0].mean()),
                "missed_hit_tokens": float(arr[:, 1].mean()),
                "false_hit_share": float((arr[:, 0] > 0).mean()),
            }
        )
    return out
