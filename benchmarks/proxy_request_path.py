"""The proxy's own CPU cost per request, by prompt length: parse, prompt tokens, block hashes,
policy decision, accounting and record, with no network and no engine.

`proxy_overhead.py` measures what a client sees (real vLLM behind the proxy, short prompts).
This isolates the part that grows with the prompt, which that benchmark cannot show: an agentic
turn is a token-id prompt of tens of thousands of tokens. The app's `_generate` runs in a loop
on one event loop with its upstream leg replaced by "first token, done" bookkeeping, so every
line of the routing path runs and nothing else does. Each prompt length is measured as a
session's next turn (the previous turn, `--new-tokens` shorter, is in the hasher's memo, as in
an agentic session) and as a sessionless request hashed from scratch.

`--cold` writes to a 64 MiB buffer before each measured request, which evicts the caches, as
the engines, the client and the other processes sharing the proxy's core do between requests
on a real machine. Measured 2026-11-30 (docs/proxy.md): a 32-token request costs 4-7x its hot
time cold (~50 -> ~375 us), spread over every step of the path, and the proxy's own histogram
in `proxy_overhead.py` (received -> sent upstream, 0.31-0.34 ms) is near the cold number.

`--steps` also times each step of the path inside the measured request (parse, session
identity, prompt tokens, hashing, the router's view, the policy's decision, admission, the
decision's record fields and metric, and the end's accounting and record; "rest" is what lies
between them: the request view, the record, the header and body checks). The steps are timed
by wrapping the functions `_generate` calls, which adds a call per step (about 0.1 us hot):
the whole-path numbers of a `--steps` run are not comparable with a run without it.

    .venv/bin/python benchmarks/proxy_request_path.py --out results/bench/proxy_request_path.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.proxy import app as proxy_app
from agentic_kvc.proxy.app import ProxyApp
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.runs import hardware_info, package_versions

REPO = Path(__file__).resolve().parents[1]
PATH = "/v1/completions"
# The steps `--steps` times, in the order `_generate` takes them.
STEPS = (
    "parse",
    "identify",
    "prompt_tokens",
    "hash",
    "view",
    "decide",
    "admit",
    "fill_decision",
    "metric_decision",
    "done",
)
# The steps that are module functions of proxy/app.py (-> their names there); the others are
# methods of the app's own objects, wrapped on the app.
_MODULE_STEPS = {
    "parse": "parse_request",
    "identify": "identify",
    "prompt_tokens": "prompt_tokens",
    "fill_decision": "_fill_decision",
}


class StepTimer:
    """Seconds per step of the measured request, by wrapping what `_generate` calls."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: dict[str, float] = {}
        self._saved: dict[str, Any] = {}  # the module functions `install` replaced

    def wrap(self, name: str, fn: Any) -> Any:
        perf = time.perf_counter
        seconds = self.seconds

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] = seconds.get(name, 0.0) + perf() - t0

        return timed

    def install(self, app: ProxyApp) -> None:
        """Wrap the module functions `_generate` calls (restored by `uninstall`) and the
        app's own objects' methods (on this app only)."""
        self._saved = {n: getattr(proxy_app, n) for n in _MODULE_STEPS.values()}
        for step, n in _MODULE_STEPS.items():
            setattr(proxy_app, n, self.wrap(step, self._saved[n]))
        app.hasher.hash = self.wrap("hash", app.hasher.hash)  # type: ignore[method-assign]
        app.state.view = self.wrap("view", app.state.view)  # type: ignore[method-assign]
        app.policy.decide = self.wrap("decide", app.policy.decide)  # type: ignore[method-assign]
        app.state.admit = self.wrap("admit", app.state.admit)  # type: ignore[method-assign]
        app.metrics.decision = self.wrap(  # type: ignore[method-assign]
            "metric_decision", app.metrics.decision
        )

    def uninstall(self) -> None:
        for n, fn in self._saved.items():
            setattr(proxy_app, n, fn)
        self._saved = {}


def make_app(policy: str, timer: StepTimer | None = None) -> ProxyApp:
    # Engines are never contacted: startup() is not run and _execute is replaced below.
    settings = ProxySettings(
        engines=["http://127.0.0.1:9", "http://127.0.0.1:10"], policy=policy, block_size=32
    )
    app = ProxyApp(settings)

    def done(rec: Any, ticket: Any) -> None:
        app.state.first_token(ticket)
        app._done(PATH, rec, ticket, "ok")

    end = done if timer is None else timer.wrap("done", done)

    async def upstream_done(*args: Any) -> None:
        admission = args[6]  # (`_execute`'s rec, admission)
        admission.on_sent()  # what the upstream client calls once the request is written
        end(args[5], admission.ticket)

    app._execute = upstream_done  # type: ignore[method-assign]
    return app


_EVICT = np.zeros(0, dtype=np.uint8)


def evict_caches() -> None:
    """Touch a line in every 64 bytes of a 64 MiB buffer: larger than this machine's caches."""
    global _EVICT
    if not len(_EVICT):
        _EVICT = np.zeros(64 << 20, dtype=np.uint8)
    _EVICT[::64] += 1


async def measure(
    app: ProxyApp,
    bodies: list[bytes],
    session: str | None,
    cold: bool = False,
    timer: StepTimer | None = None,
) -> float:
    """Send `bodies` in order as one session's turns; seconds taken by the last one (with
    the caches evicted just before it if `cold`; its steps timed into `timer`)."""
    headers = [(b"content-type", b"application/json")]
    if session is not None:
        headers.append((b"x-session-id", session.encode()))
    scope = {"type": "http", "path": PATH, "method": "POST", "headers": headers}

    async def send(message: Any) -> None:
        return None

    dt = 0.0
    for k, body in enumerate(bodies):
        last = k == len(bodies) - 1
        if cold and last:
            evict_caches()
        if timer is not None:
            timer.seconds.clear()
            timer.on = last

        async def receive(body: bytes = body) -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        t0 = time.perf_counter()
        await app._generate(scope, receive, send, PATH)
        dt = time.perf_counter() - t0
    if timer is not None:
        timer.on = False
    return dt


def body(tokens: int, first: int = 100_000) -> bytes:
    prompt = list(range(first, first + tokens))
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 16, "stream": True}).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "results/bench/proxy_request_path.json")
    ap.add_argument("--lengths", default="32,1000,10000,50000,100000", help="prompt tokens")
    ap.add_argument("--policies", default="round_robin,unified")
    ap.add_argument(
        "--new-tokens", type=int, default=1000, help="tokens a session's turn adds to the last"
    )
    ap.add_argument("--repeats", type=int, default=30, help="measured requests per case")
    ap.add_argument(
        "--cold", action="store_true", help="evict the caches before each measured request"
    )
    ap.add_argument(
        "--steps",
        action="store_true",
        help="also time each step of the path (median per step, in microseconds)",
    )
    args = ap.parse_args()
    results = []
    for policy in args.policies.split(","):
        for n in (int(x) for x in args.lengths.split(",")):
            full = body(n)
            previous = body(max(n - args.new_tokens, 1))
            for mode in ("session", "sessionless"):
                timer = StepTimer() if args.steps else None
                app = make_app(policy, timer)
                if timer is not None:
                    timer.install(app)
                samples = []
                steps: dict[str, list[float]] = {k: [] for k in (*STEPS, "rest")}
                for rep in range(args.repeats + 1):  # the first is a warm-up
                    if mode == "session":
                        # The session's previous turn (unmeasured), then this turn: it extends
                        # the previous prompt by `new_tokens`, as an agent's next call does.
                        turns = [previous, full]
                        dt = asyncio.run(measure(app, turns, f"s{rep}", args.cold, timer))
                    else:
                        dt = asyncio.run(measure(app, [full], None, args.cold, timer))
                    if rep:
                        samples.append(dt * 1e3)
                        if timer is not None:
                            for k in STEPS:
                                steps[k].append(timer.seconds.get(k, 0.0) * 1e6)
                            steps["rest"].append(dt * 1e6 - sum(timer.seconds.values()) * 1e6)
                if timer is not None:
                    timer.uninstall()
                ms = sorted(samples)
                row = {
                    "policy": policy,
                    "prompt_tokens": n,
                    "mode": mode,
                    "samples": len(ms),
                    "p50_ms": statistics.median(ms),
                    "p90_ms": ms[int(0.9 * (len(ms) - 1))],
                    "mean_ms": statistics.fmean(ms),
                }
                if timer is not None:
                    row["step_p50_us"] = {
                        k: round(statistics.median(v), 2) for k, v in steps.items()
                    }
                results.append(row)
                print(
                    f"{policy:12} {n:>7} tokens {mode:11} p50 {row['p50_ms']:7.3f} ms "
                    f"p90 {row['p90_ms']:7.3f} ms",
                    file=sys.stderr,
                )
                if timer is not None:
                    print(
                        "    steps p50 us: "
                        + ", ".join(f"{k} {v:.1f}" for k, v in row["step_p50_us"].items()),
                        file=sys.stderr,
                    )
    report = {
        "benchmark": "proxy_request_path",
        "command": " ".join(["python", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": hardware_info(),
        "versions": {**package_versions(), "python": platform.python_version()},
        "parameters": {k: v for k, v in vars(args).items() if k != "out"}
        | {
            "block_size": 32,
            "prompt": "token ids; session: the turn after one of n - new_tokens",
            "caches": "evicted before each measured request" if args.cold else "as left",
            "steps": list((*STEPS, "rest")) if args.steps else None,
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
