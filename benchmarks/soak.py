"""Soak: a long replay at moderate load through the proxy on real vLLM CPU engines.

Two vLLM instances (CPU, tiny model) behind `akvc proxy` (a separate process, policy
`unified`). Closed-loop agent sessions (each turn's prompt is the previous one plus a new
block, like a coding agent's growing context) are replayed in rounds, a few sessions in flight
at a time, until `--duration-s` has passed. Every few seconds the proxy process's RSS and open
file descriptors are read from /proc. The claims checked: zero failed requests, and the
proxy's memory and fds flat (the last quarter's median within `--rss-tolerance` of the second
quarter's: the first quarter holds the warm-up growth of pools and caches).

    flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock \\
        .venv/bin/python benchmarks/soak.py --out results/bench/soak.json

Not part of the default report pipeline (it takes over five minutes of both cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.config import FleetConfig
from agentic_kvc.replay.driver import ReplaySettings, replay_async
from agentic_kvc.replay.prompts import token_fn
from agentic_kvc.runs import hardware_info, package_versions
from agentic_kvc.serve.hostload import HostLoadSampler
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.serve.services import ProxyProcess
from agentic_kvc.workload.model import Block, Request, Session, Workload

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "models" / "tiny-qwen2"
BLOCK = 32


def proc_usage(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open fds) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(list(Path(f"/proc/{pid}/fd").iterdir()))


def session(sid: str, base: int, turns: int, out: int) -> Session:
    """Turn k's prompt = turn k-1's + one new block (sizes cycle), `out` tokens each."""
    sizes = [512, 128, 256, 128, 192, 64]
    reqs = []
    for t in range(turns):
        blocks = tuple(Block(base + j, sizes[j % len(sizes)]) for j in range(t + 1))
        reqs.append(Request(f"{sid}-{t}", sid, t, sum(b.tokens for b in blocks), out, blocks))
    return Session(sid, reqs)


class Sampler(threading.Thread):
    def __init__(self, pid: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s = pid, every_s
        self.rows: list[dict[str, float]] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stop_event.is_set():
            rss, fds = proc_usage(self.pid)
            self.rows.append(
                {"t_s": round(time.monotonic() - self.t0, 2), "rss_kb": rss, "fds": fds}
            )
            self.stop_event.wait(self.every_s)


def quarter_medians(rows: list[dict[str, float]], key: str) -> list[float]:
    n = len(rows)
    qs = [rows[i * n // 4 : (i + 1) * n // 4] for i in range(4)]
    return [statistics.median(r[key] for r in q) if q else float("nan") for q in qs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the numbers")
    ap.add_argument("--duration-s", type=float, default=300.0, help="replay this long")
    ap.add_argument("--inflight", type=int, default=4, help="sessions in flight at once")
    ap.add_argument("--sessions-per-round", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--session-pool", type=int, default=32, help="distinct session ids")
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--sample-every-s", type=float, default=2.0)
    ap.add_argument("--rss-tolerance", type=float, default=0.10, help="relative, late vs mid")
    ap.add_argument("--model", type=Path, default=TINY)
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        sys.exit(f"tiny model not found at {args.model} (run `make model`)")

    tokens = token_fn(args.model)
    cfg = FleetConfig(instances=2, model=str(args.model), block_size=BLOCK, max_num_seqs=32)
    tmp = Path(tempfile.mkdtemp(prefix="akvc_soak_"))
    records: list[Any] = []
    rounds = 0
    with HostLoadSampler(2.0) as host:
        with VllmFleet.from_config(cfg, tmp / "logs", device="cpu", startup_timeout_s=400) as fleet:
            proxy = ProxyProcess(fleet.urls, "unified", tmp / "logs", records=tmp / "p.jsonl")
            with proxy:
                assert proxy.proc is not None and proxy.proc.pid is not None
                sampler = Sampler(proxy.proc.pid, args.sample_every_s)
                sampler.start()
                host.mark("soak")
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.duration_s:
                    # New prompt content every round, session ids from a fixed pool: a steady
                    # population of agents, each starting new tasks. The router's per-session
                    # state is bounded by design (LRU memo, engine-sized cache view), so a
                    # pool keeps the soak about leaks, not about caches filling up.
                    base = 1_000_000 * (rounds + 1)
                    ids = [(rounds * args.sessions_per_round + i) % args.session_pool
                           for i in range(args.sessions_per_round)]  # fmt: skip
                    wl = Workload(
                        [
                            session(f"agent{k}", base + 1_000 * i, args.turns, args.output_tokens)
                            for i, k in enumerate(ids)
                        ]
                    )
                    settings = ReplaySettings(
                        target=proxy.url,
                        model=fleet.model_name,
                        max_inflight_sessions=args.inflight,
                        timeout_s=120,
                        progress=False,
                    )
                    records += asyncio.run(replay_async(wl, settings, tokens))
                    rounds += 1
                wall = time.monotonic() - t0
                host.close("soak")
                sampler.stop_event.set()
                sampler.join()
                health = httpx.get(proxy.url + "/health", timeout=10).json()
        load = host.stop()

    errors = [r.error for r in records if r.error]
    rows = sampler.rows
    rss_q = quarter_medians(rows, "rss_kb")
    fd_q = quarter_medians(rows, "fds")
    rss_growth = (rss_q[3] - rss_q[1]) / rss_q[1]
    ttft = sorted(r.ttft_s for r in records if r.ttft_s is not None)
    result = {
        "benchmark": "soak",
        "duration_s": round(wall, 1),
        "rounds": rounds,
        "requests": len(records),
        "errors": len(errors),
        "first_errors": errors[:5],
        "requests_per_s": round(len(records) / wall, 2),
        "output_tokens": sum(r.output_tokens for r in records),
        "ttft_p50_s": round(statistics.median(ttft), 4) if ttft else None,
        "ttft_p99_s": round(ttft[int(0.99 * (len(ttft) - 1))], 4) if ttft else None,
        "proxy_rss_kb_quarter_medians": rss_q,
        "proxy_rss_growth_mid_to_late": round(rss_growth, 4),
        "proxy_fds_quarter_medians": fd_q,
        "proxy_rss_kb_max": max(r["rss_kb"] for r in rows),
        "proxy_fds_max": max(r["fds"] for r in rows),
        "samples": rows,
        "engines_healthy_at_end": [e["healthy"] for e in health["engines"]],
        "settings": vars(args) | {"out": str(args.out), "model": str(args.model)},
        "host_load": load,
        "hardware": hardware_info(),
        "packages": package_versions(),
        "claims": {
            "zero_errors": not errors,
            "flat_rss": abs(rss_growth) <= args.rss_tolerance,
            "flat_fds": fd_q[3] <= fd_q[1] + 2,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {
                k: v
                for k, v in result.items()
                if k not in ("samples", "host_load", "hardware", "packages")
            },
            indent=2,
        )
    )
    return 0 if all(result["claims"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
