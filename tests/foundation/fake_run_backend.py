"""A fake backend for tests: deterministic synthetic records in the real record schema.

It routes with the real policy named in the config (so route receipts look real) and draws
latencies from a seeded generator, so two calls with one config give identical records. It
counts its calls so tests can tell a no-op rerun from a real one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agentic_kvc.config import RunConfig
from agentic_kvc.metrics.records import InstanceSample, RequestRecord
from agentic_kvc.policy import FleetView, InstanceView, RequestView, get_policy
from agentic_kvc.run_backend import BackendResult

ROUTE_CLASSES = ("WARM", "MEDIUM", "HEAVY")


class CountingFakeBackend:
    def __init__(self, requests_per_session: int = 3) -> None:
        self.calls = 0
        self.requests_per_session = requests_per_session

    def __call__(self, config: RunConfig, run_dir: Path) -> BackendResult:
        self.calls += 1
        records, samples = synthetic_run(config, self.requests_per_session)
        return BackendResult(records, samples, {"fake": True, "calls": self.calls})


def synthetic_run(
    config: RunConfig, requests_per_session: int = 3
) -> tuple[list[dict], list[dict]]:
    """Records and instance samples for `config` (sessions from its generator, default 4)."""
    rng = np.random.default_rng(config.seed)
    n_inst = config.fleet.instances
    policy = get_policy(config.policy.name, config.policy.params)
    instances = [InstanceView(index=i) for i in range(n_inst)]
    sessions = config.workload.generator.sessions if config.workload.generator else 4
    records: list[dict] = []
    t = 0.0
    for s in range(sessions):
        for turn in range(requests_per_session):
            rid = f"s{s}-t{turn}"
            inp = int(rng.integers(200, 4000))
            out = int(rng.integers(1, 64))
            req = RequestView(rid, f"s{s}", turn, inp, out)
            decision = policy.decide(req, FleetView(instances=instances, now=t))
            instances[decision.prefill].pending_prefill_tokens += inp
            cached = int(rng.integers(0, inp)) if turn else 0
            ttft = float(rng.gamma(2.0, 0.05))
            e2e = ttft + out * float(rng.uniform(0.005, 0.02))
            err = "timeout" if rng.random() < 0.05 else None
            rec = RequestRecord(
                request_id=rid,
                session_id=f"s{s}",
                turn=turn,
                arrival_s=t,
                input_tokens=inp,
                output_tokens=out,
                cached_tokens=cached,
                policy=config.policy.name,
                route_class=str(rng.choice(ROUTE_CLASSES)),
                reason=decision.reason,
                prefill_instance=decision.prefill,
                decode_instance=decision.decode,
                t_proxy_recv=t,
                t_first_token=None if err else t + ttft,
                t_done=None if err else t + e2e,
                error=err,
            ).finalize()
            records.append(rec.to_dict())
            t += float(rng.exponential(0.2))
    samples = [
        InstanceSample(
            t=float(k), instance=i, running=int(rng.integers(0, 8)), waiting=0, kv_usage=0.1
        ).to_dict()
        for k in range(3)
        for i in range(n_inst)
    ]
    return records, samples
