"""benchmarks/proxy_request_path.py's `--steps`: every step it names runs once per request,
the steps' time never exceeds the request's, and the module functions it wraps are the app's
own again afterwards (a later app in the same process runs unwrapped). No network."""

from __future__ import annotations

import asyncio

from agentic_kvc.bench_scripts import load_benchmark
from agentic_kvc.proxy import app as proxy_app

bench = load_benchmark("proxy_request_path")


def test_each_step_is_timed_within_the_request_and_the_wrappers_are_removed() -> None:
    saved = {n: getattr(proxy_app, n) for n in bench._MODULE_STEPS.values()}
    timer = bench.StepTimer()
    app = bench.make_app("round_robin", timer)
    timer.install(app)
    try:
        for session in (None, "s1"):
            dt = asyncio.run(
                bench.measure(app, [bench.body(8), bench.body(40)], session, timer=timer)
            )
            # The last request's steps only: the session's first turn was not counted.
            assert set(timer.seconds) == set(bench.STEPS)
            assert all(v > 0 for v in timer.seconds.values())
            assert sum(timer.seconds.values()) <= dt
            assert not timer.on
    finally:
        timer.uninstall()
    assert {n: getattr(proxy_app, n) for n in saved} == saved


def test_a_timer_that_is_off_counts_nothing() -> None:
    timer = bench.StepTimer()
    app = bench.make_app("round_robin", timer)
    timer.install(app)
    try:
        timer.on = False
        asyncio.run(app._generate(*_request(bench.body(32))))
        assert timer.seconds == {}
    finally:
        timer.uninstall()


def _request(body: bytes) -> tuple:
    scope = {
        "type": "http",
        "path": bench.PATH,
        "method": "POST",
        "headers": [(b"content-type", b"application/json")],
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: object) -> None:
        return None

    return scope, receive, send, bench.PATH


def test_chat_turns_are_tokenized_through_the_memo(tiny_model) -> None:
    """The chat part's next turn extends its previous one, and the app with the memo reuses
    the previous turn's ids for it (the one without it tokenizes everything)."""
    import json

    from agentic_kvc.proxy.prompt import PromptTokenizer

    tok = PromptTokenizer(tiny_model, memo_mib=0)
    previous, full = bench.chat_turns(tok, 600, 100, seed=1)
    before, after = json.loads(previous)["messages"], json.loads(full)["messages"]
    assert after[:-2] == before and [m["role"] for m in after[-2:]] == ["assistant", "user"]
    assert len(tok.encode(tok.render_chat(after))) >= 600
    for mib in (256, 0):
        app = bench.make_app("round_robin", None, tiny_model, mib)
        asyncio.run(bench.measure(app, [previous, full], "c", path=bench.CHAT_PATH))
        memo = app.tokenizer.memo
        assert (memo.reused_tokens > 0) == (mib > 0)
