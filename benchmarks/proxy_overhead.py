"""Proxy overhead: latency through a router minus latency direct to the backend.

Side by side in one run, in front of the same two fake vLLM backends (separate processes):
direct, `akvc proxy` (one or more policies, estimated cache view), and `vllm-router`
(`round_robin`, `cache_aware`) from the peers' venv. All targets run at once and are measured
in interleaved rounds, so a slow spell on the shared machine hits every target alike.

Per target: sequential short requests (token-id prompt, 4 output tokens), streaming and not,
p50/p99 latency, and the added p50/p99 against direct; then throughput at concurrency 64.

    .venv/bin/python benchmarks/proxy_overhead.py --out results/bench/proxy_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
PEERS = REPO / ".venv-peers" / "bin" / "vllm-router"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    host, port = url.removeprefix("http://").split(":")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")


def start(stack: ExitStack, cmd: list[str], url: str, log: Path) -> None:
    fh = stack.enter_context(log.open("wb"))
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    stack.callback(stop)
    wait_ready(url, proc)


class SeqClient:
    """Sequential keep-alive HTTP/1.1 client (stdlib: the least client overhead in Python)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def one(self, body: bytes) -> float:
        t0 = time.perf_counter()
        self.conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200 or not data:
            raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
        return dt


async def throughput(url: str, body: bytes, total: int, concurrency: int) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    errors = 0
    async with aiohttp.ClientSession(connector=connector) as http:
        todo = iter(range(total))

        async def worker() -> None:
            nonlocal errors
            for _ in todo:
                async with http.post(
                    url + "/v1/completions",
                    data=body,
                    headers={"content-type": "application/json"},
                ) as r:
                    await r.read()
                    errors += r.status != 200

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        dt = time.perf_counter() - t0
    return {"requests": total, "seconds": dt, "req_per_s": total / dt, "errors": errors}


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
        "n": len(xs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "results/bench/proxy_overhead.json")
    ap.add_argument(
        "--requests", type=int, default=2000, help="sequential requests per target and mode"
    )
    ap.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds the requests are split in"
    )
    ap.add_argument("--tput-requests", type=int, default=3000, help="requests per throughput run")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=4)
    ap.add_argument(
        "--policies",
        default="round_robin,unified",
        help="akvc policies to measure (comma-separated; unknown ones are skipped)",
    )
    ap.add_argument("--no-peers", action="store_true", help="skip vllm-router")
    args = ap.parse_args()

    from agentic_kvc.policy.registry import list_policies

    known = list_policies()
    policies = [p for p in args.policies.split(",") if p in known]
    logs = args.out.parent / "proxy_overhead_logs"
    logs.mkdir(parents=True, exist_ok=True)
    targets: dict[str, str] = {}
    with ExitStack() as stack:
        backends = []
        for i in range(2):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [PY, "-m", "agentic_kvc.proxy.fake_backend", "--port", str(port)]
            start(stack, cmd, url, logs / f"backend{i}.log")
            backends.append(url)
        targets["direct"] = backends[0]
        for pol in policies:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [
                PY,
                "-m",
                "agentic_kvc.cli",
                "proxy",
                "--policy",
                pol,
                "--port",
                str(port),
                "--log-level",
                "warning",
            ]
            for b in backends:
                cmd += ["--backend", b]
            start(stack, cmd, url, logs / f"akvc_{pol}.log")
            targets[f"akvc:{pol}"] = url
        if not args.no_peers and PEERS.exists():
            for pol in ("round_robin", "cache_aware"):
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                cmd = [
                    str(PEERS),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--worker-urls",
                    *backends,
                    "--policy",
                    pol,
                    "--prometheus-host",
                    "127.0.0.1",
                    "--prometheus-port",
                    str(free_port()),
                    "--worker-startup-check-interval",
                    "1",
                    "--log-level",
                    "warning",
                ]
                start(stack, cmd, url, logs / f"vllm_router_{pol}.log")
                targets[f"vllm-router:{pol}"] = url

        prompt = list(range(1000, 1000 + args.prompt_tokens))
        bodies = {
            mode: json.dumps(
                {
                    "model": "fake-model",
                    "prompt": prompt,
                    "stream": mode == "stream",
                    "max_tokens": args.output_tokens,
                }
            ).encode()
            for mode in ("stream", "nonstream")
        }
        clients = {name: SeqClient(url) for name, url in targets.items()}
        lat: dict[str, dict[str, list[float]]] = {
            n: {"stream": [], "nonstream": []} for n in targets
        }
        for client in clients.values():  # warm-up: pools, caches, JITs
            for body in bodies.values():
                for _ in range(100):
                    client.one(body)
        per_round = max(args.requests // args.rounds, 1)
        for r in range(args.rounds):
            for name, client in clients.items():
                for mode, body in bodies.items():
                    lat[name][mode].extend(client.one(body) for _ in range(per_round))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        results: dict[str, Any] = {}
        for name in targets:
            entry: dict[str, Any] = {}
            for mode in bodies:
                stats = pct(lat[name][mode])
                base = pct(lat["direct"][mode])
                stats["added_p50_ms"] = stats["p50_ms"] - base["p50_ms"]
                stats["added_p99_ms"] = stats["p99_ms"] - base["p99_ms"]
                entry[mode] = stats
            results[name] = entry
        for name, url in targets.items():
            for mode in ("nonstream", "stream"):
                tp = asyncio.run(
                    throughput(url, bodies[mode], args.tput_requests, args.concurrency)
                )
                results[name][f"throughput_c{args.concurrency}_{mode}"] = tp
            print(f"throughput {name} done", file=sys.stderr)

    peers_version = None
    if PEERS.exists():
        out = subprocess.run(
            [str(REPO / ".venv-peers/bin/pip"), "show", "vllm-router"],
            capture_output=True,
            text=True,
        ).stdout
        m = re.search(r"^Version: (.+)$", out, re.M)
        peers_version = m.group(1) if m else None
    report = {
        "benchmark": "proxy_overhead",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "setup": {k: v for k, v in vars(args).items() if k != "out"}
        | {
            "backend": "agentic_kvc.proxy.fake_backend x2 (uvicorn, separate processes)",
            "client": "http.client keep-alive (sequential); aiohttp (throughput)",
            "vllm_router_version": peers_version,
            "policies": policies,
            "cache_view": "estimated",
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'target':28} {'mode':10} {'p50':>7} {'p99':>7} {'+p50':>7} {'+p99':>7}  req/s c64")
    for name, entry in results.items():
        for mode in ("stream", "nonstream"):
            s = entry[mode]
            tp = entry[f"throughput_c{args.concurrency}_{mode}"]["req_per_s"]
            print(
                f"{name:28} {mode:10} {s['p50_ms']:7.3f} {s['p99_ms']:7.3f} "
                f"{s['added_p50_ms']:7.3f} {s['added_p99_ms']:7.3f}  {tp:8.0f}"
            )
    print(f"wrote {args.out}")
    shutil.rmtree(logs, ignore_errors=True) if not any(logs.iterdir()) else None


if __name__ == "__main__":
    main()
