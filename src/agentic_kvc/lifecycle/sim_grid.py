"""The seeds' lifecycle grid predicted by the simulator's cost model (H20 scale, no engines).

Per (C, N, O) on an idle P and D that both hold the C-token prefix (the microbenchmark's
protocol): P prefills the N new tokens in chunks after C cached ones, D pulls their KV
(`sim.kv_transfer_fixed_s` + bytes / `sim.kv_transfer_gbps`, as `sim.fleet` charges a
transfer), then D's first step emits the first token. Colocated, D prefills the same N and
its last prefill step emits the first token. The O - 1 further tokens decode alone (batch 1)
on either path. Closed-form from the profile: deterministic, milliseconds of CPU.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.config import FleetConfig, SimConfig
from agentic_kvc.profiles.cost import StepCost

FIELDS = [
    "C",
    "N",
    "O",
    "prefill_ms",
    "transfer_ms",
    "kv_bytes",
    "d_first_step_ms",
    "decode_ms",
    "colo_ttft_ms",
    "pd_ttft_ms",
    "pd_minus_colo_ttft_ms",
    "colo_e2e_ms",
    "pd_e2e_ms",
]


def prefill_s(cost: StepCost, c: int, n: int, chunk: int) -> float:
    """Chunked prefill of n new tokens after c cached: each chunk attends to all before it."""
    done, total = 0, 0.0
    while done < n:
        step = min(chunk, n - done)
        total += cost.step_s([(step, c + done)], 0, 0)
        done += step
    return total


def transfer_s(sim: SimConfig, tokens: int, kv_bytes_per_token: float) -> float:
    """One P -> D pull as the simulator charges it (sim.fleet._start_transfer)."""
    return sim.kv_transfer_fixed_s + tokens * kv_bytes_per_token * 8 / (sim.kv_transfer_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class SimGridSpec:
    hardware: str = "h20"
    model: str = "qwen3-coder-30b-a3b"
    chunk: int = FleetConfig().max_num_batched_tokens  # the seeds' 8192


def rows(
    cs: list[int], ns: list[int], os: list[int], spec: SimGridSpec | None = None
) -> Iterator[dict[str, float | int]]:
    from agentic_kvc.profiles import get_profile

    spec = spec or SimGridSpec()
    prof, sim = get_profile(spec.hardware, spec.model), SimConfig()
    for c in cs:
        for n in ns:
            pre = prefill_s(prof.cost, c, n, spec.chunk)
            tr = transfer_s(sim, n, prof.kv_bytes_per_token)
            first = prof.cost.step_s([], 1, c + n)
            for o in os:
                dec = sum(prof.cost.step_s([], 1, c + n + i) for i in range(1, o))
                colo, pd = pre, pre + tr + first
                yield {
                    "C": c,
                    "N": n,
                    "O": o,
                    "prefill_ms": round(pre * 1e3, 3),
                    "transfer_ms": round(tr * 1e3, 3),
                    "kv_bytes": int(n * prof.kv_bytes_per_token),
                    "d_first_step_ms": round(first * 1e3, 3),
                    "decode_ms": round(dec * 1e3, 3),
                    "colo_ttft_ms": round(colo * 1e3, 3),
                    "pd_ttft_ms": round(pd * 1e3, 3),
                    "pd_minus_colo_ttft_ms": round((pd - colo) * 1e3, 3),
                    "colo_e2e_ms": round((colo + dec) * 1e3, 3),
                    "pd_e2e_ms": round((pd + dec) * 1e3, 3),
                }


def write(out: Path, cs: list[int], ns: list[int], os: list[int]) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    got = list(rows(cs, ns, os))
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(got)
    return len(got)
