"""The proxy's own CPU cost per request, by prompt length: parse, prompt tokens, block hashes,
policy decision, accounting and record, with no network and no engine.

`proxy_overhead.py` measures what a client sees (real vLLM behind the proxy, short prompts).
This isolates the part that grows with the prompt, which that benchmark cannot show: an agentic
turn is a token-id prompt of tens of thousands of tokens. The app's `_generate` runs in a loop
on one event loop with its upstream leg replaced by "first token, done" bookkeeping, so every
line of the routing path runs and nothing else does. Each prompt length is measured as a
session's next turn (the previous turn, `--new-tokens` shorter, is in the hasher's memo and
the prompt memo, `proxy/ids_memo.py`, as in an agentic session) and as a sessionless request
read and hashed from scratch.

`--chat-lengths` also measures chat requests (/v1/chat/completions with the tiny model's
tokenizer and chat template, `--model-dir`), where the proxy renders and tokenizes the
conversation: a session's next turn adds an assistant reply and a tool output of about
`--new-tokens` tokens, with the token memo (`proxy/token_memo.py`: the previous turn's ids
reused up to its generation prompt) and without it (`--token-memo-mib 0`), interleaved.

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
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.proxy import app as proxy_app
from agentic_kvc.proxy.app import ProxyApp
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.proxy.token_memo import DEFAULT_BUDGET_MIB
from agentic_kvc.runs import hardware_info, package_versions

REPO = Path(__file__).resolve().parents[1]
PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
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


def make_app(
    policy: str,
    timer: StepTimer | None = None,
    tokenizer: Path | None = None,
    token_memo_mib: int = DEFAULT_BUDGET_MIB,
) -> ProxyApp:
    # Engines are never contacted: startup() is not run and _execute is replaced below.
    settings = ProxySettings(
        engines=["http://127.0.0.1:9", "http://127.0.0.1:10"],
        policy=policy,
        block_size=32,
        tokenizer=tokenizer,
        token_memo_mib=token_memo_mib,
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
    path: str = PATH,
) -> float:
    """Send `bodies` in order as one session's turns; seconds taken by the last one (with
    the caches evicted just before it if `cold`; its steps timed into `timer`)."""
    headers = [(b"content-type", b"application/json")]
    if session is not None:
        headers.append((b"x-session-id", session.encode()))
    scope = {"type": "http", "path": path, "method": "POST", "headers": headers}

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
        await app._generate(scope, receive, send, path)
        dt = time.perf_counter() - t0
    if timer is not None:
        timer.on = False
    return dt


def body(tokens: int, first: int = 100_000) -> bytes:
    prompt = list(range(first, first + tokens))
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 16, "stream": True}).encode()


# Words of a coding agent's conversation (code, paths, tool output), for chat contents.
_WORDS = [
    "def",
    "return",
    "self",
    "import",
    "from",
    "class",
    "if",
    "else",
    "for",
    "in",
    "while",
    "try",
    "except",
    "raise",
    "with",
    "as",
    "None",
    "True",
    "False",
    "print(x)",
    "len(items)",
    "src/agentic_kvc/proxy/app.py",
    "tests/test_app.py",
    "line",
    "42",
    "Error:",
    "Traceback",
    "(most",
    "recent",
    "call",
    "last):",
    "File",
    "assert",
    "==",
    "!=",
    "+=",
    "->",
    "...",
    "{}",
    "[]",
    "()",
    "0",
    "1",
    "2",
    "16",
    "256",
    "1024",
    "0x7f",
    "the",
    "a",
    "to",
    "of",
    "and",
    "bug",
    "fix",
    "test",
    "passed",
    "failed",
    "ok",
    "diff",
    "--git",
    "+++",
    "---",
    "@@",
]


def chat_turns(tokenizer: Any, tokens: int, new_tokens: int, seed: int) -> tuple[bytes, bytes]:
    """(the previous turn's body, this turn's): a system prompt and user/assistant/tool
    messages of about `new_tokens` tokens per turn, until the rendered chat has `tokens`;
    this turn adds an assistant reply and a tool output to the previous one."""
    rng = random.Random(seed)
    per_word = 2.0  # tokens a word, about, with the tiny tokenizer (the loop checks)

    def content(n_tokens: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(max(1, int(n_tokens / per_word))))

    messages = [{"role": "system", "content": content(min(2000, tokens // 4))}]
    half = max(1, new_tokens // 2)
    while len(tokenizer.encode(tokenizer.render_chat(messages))) < tokens:
        messages += [
            {"role": "assistant", "content": content(half)},
            {"role": "user", "content": content(half)},
        ]
    if len(messages) < 3:
        messages += [
            {"role": "assistant", "content": content(half)},
            {"role": "user", "content": content(half)},
        ]

    def chat_body(msgs: list[dict[str, str]]) -> bytes:
        return json.dumps(
            {"model": "m", "messages": msgs, "max_tokens": 16, "stream": True}
        ).encode()

    return chat_body(messages[:-2]), chat_body(messages)


def measure_chat(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    """Chat next turns, with the token memo and without it, interleaved by repeat."""
    from agentic_kvc.proxy.prompt import PromptTokenizer

    tokenizer = PromptTokenizer(args.model_dir, memo_mib=0)
    policy = args.policies.split(",")[0]
    for n in (int(x) for x in args.chat_lengths.split(",")):
        previous, full = chat_turns(tokenizer, n, args.new_tokens, seed=n)
        n_tokens = len(tokenizer.encode(tokenizer.render_chat(json.loads(full)["messages"])))
        samples: dict[int, list[float]] = {DEFAULT_BUDGET_MIB: [], 0: []}
        apps = {mib: make_app(policy, None, args.model_dir, mib) for mib in samples}
        for rep in range(args.chat_repeats + 1):  # the first is a warm-up
            for mib, app in apps.items():
                turns = [previous, full]
                dt = asyncio.run(measure(app, turns, f"c{rep}", args.cold, None, CHAT_PATH))
                if rep:
                    samples[mib].append(dt * 1e3)
        for mib, ms in samples.items():
            ms.sort()
            row = {
                "policy": policy,
                "prompt": "chat",
                "prompt_tokens": n_tokens,
                "mode": "session",
                "token_memo": "on" if mib else "off",
                "samples": len(ms),
                "p50_ms": statistics.median(ms),
                "p90_ms": ms[int(0.9 * (len(ms) - 1))],
                "mean_ms": statistics.fmean(ms),
            }
            results.append(row)
            print(
                f"{policy:12} {n_tokens:>7} tokens chat, memo {row['token_memo']:3} "
                f"p50 {row['p50_ms']:8.3f} ms p90 {row['p90_ms']:8.3f} ms",
                file=sys.stderr,
            )


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
    ap.add_argument(
        "--chat-lengths",
        default="2000,20000",
        help="chat prompt tokens (rendered), measured with and without the token memo; '' for none",
    )
    ap.add_argument("--chat-repeats", type=int, default=10, help="measured chat turns per case")
    ap.add_argument(
        "--model-dir",
        type=Path,
        default=REPO / "models/tiny-qwen2",
        help="tokenizer and chat template for the chat requests (`make model`)",
    )
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    for policy in args.policies.split(","):
        for n in (int(x) for x in args.lengths.split(",")):
            for mode in ("session", "sessionless"):
                timer = StepTimer() if args.steps else None
                app = make_app(policy, timer)
                if timer is not None:
                    timer.install(app)
                samples = []
                steps: dict[str, list[float]] = {k: [] for k in (*STEPS, "rest")}
                for rep in range(args.repeats + 1):  # the first is a warm-up
                    # Each repeat's prompts are its own (another first id), so no repeat finds
                    # an earlier one's in the proxy's prompt memo (proxy/ids_memo.py).
                    full = body(n, first=100_000 + rep)
                    previous = body(max(n - args.new_tokens, 1), first=100_000 + rep)
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
                    "prompt": "token_ids",
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
    if args.chat_lengths:
        if (args.model_dir / "tokenizer.json").is_file():
            measure_chat(args, results)
        else:
            print(f"chat requests skipped: no tokenizer in {args.model_dir}", file=sys.stderr)
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
