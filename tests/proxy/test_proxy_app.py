"""The proxy against fake vLLM engines: routing, accounting, records, metrics, failures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.policy.base import Decision, FleetView, NoHealthyInstance, Policy, RequestView
from agentic_kvc.policy.registry import list_policies, register
from agentic_kvc.proxy.app import ProxyApp
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings


class _MostCached(Policy):
    """Test policy: the instance with the longest estimated cached prefix (ties: lowest index)."""

    name = "test_most_cached"

    def decide(self, request: RequestView, fleet: FleetView) -> Decision:
        cached = fleet.cached_tokens(request)
        live = [i.index for i in fleet.healthy()]
        if not live:
            raise NoHealthyInstance("none")
        best = max(live, key=lambda i: (cached[i], -i))
        cls = "WARM" if cached[best] else "MEDIUM"
        return Decision(
            best, best, cls, "most_cached", self.name, cached[best], {best: cached[best]}
        )


if "test_most_cached" not in list_policies():
    register(_MostCached)

Fakes = list[tuple[FakeVLLM, ServerThread]]


def _wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def _records(proxy: ProxyThread) -> list[dict]:
    proxy.app.records.flush()
    path = proxy.app.settings.records
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _idle(proxy: ProxyThread) -> bool:
    return all(
        i.num_requests == 0 and i.pending_prefill_tokens == 0 and i.decode_requests == 0
        and i.decode_tokens == 0
        for i in proxy.app.state.instances
    )  # fmt: skip


def test_round_robin_alternates_and_headers_name_the_route(make_proxy, fakes: Fakes) -> None:
    _, client = make_proxy(policy="round_robin")
    seen = []
    for _ in range(4):
        r = client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        assert r.status_code == 200
        assert r.headers["x-akvc-prefill"] == r.headers["x-akvc-decode"]
        assert r.headers["x-akvc-route-class"]  # the policy's class, whatever it names it
        assert r.headers["x-akvc-reason"] == "round_robin"
        seen.append(int(r.headers["x-akvc-decode"]))
    assert seen == [0, 1, 0, 1]
    assert [len(f.requests) for f, _ in fakes] == [2, 2]


def test_estimated_index_keeps_a_session_on_its_cached_instance(make_proxy, fakes: Fakes) -> None:
    proxy, client = make_proxy(policy="test_most_cached")
    assert proxy.app.block_size == 16  # read from the engine's cache_config_info
    history = list(range(100, 164))  # 4 blocks
    first = client.post("/v1/completions", json={"prompt": history, "max_tokens": 1})
    home = first.headers["x-akvc-decode"]
    # Another session's prompt lands elsewhere only if the policy sees no cache for it there.
    for turn in range(3):
        history = history + list(range(1000 + 32 * turn, 1032 + 32 * turn))
        r = client.post(
            "/v1/completions",
            json={"prompt": history, "max_tokens": 1},
            headers={"x-session-id": "agent-1"},
        )
        assert r.headers["x-akvc-decode"] == home
        assert r.headers["x-akvc-route-class"] == "WARM"
    recs = _records(proxy)
    assert [r["predicted_cached_tokens"] for r in recs] == [0, 64, 96, 128]
    assert [r["turn"] for r in recs] == [0, 0, 1, 2]
    # the fake's toy prefix cache agrees with the router's estimate
    assert [r["cached_tokens"] for r in recs] == [0, 64, 96, 128]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("usage", [True, False])
def test_stream_through_proxy_equals_engine_bytes(make_proxy, fakes: Fakes, path, usage) -> None:
    proxy, client = make_proxy(policy="round_robin")
    body = {"max_tokens": 5, "stream": True}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hello there"}]
    else:
        body["prompt"] = list(range(15))  # under one block: the toy cache stays out of usage
    if usage:
        body["stream_options"] = {"include_usage": True}
    via_proxy = client.post(path, json=body)
    target = fakes[int(via_proxy.headers["x-akvc-decode"])][1]
    direct = httpx.post(target.url + path, json=body)
    assert via_proxy.status_code == 200
    assert via_proxy.content == direct.content
    assert via_proxy.content.endswith(b"data: [DONE]\n\n")
    assert (b'"usage"' in via_proxy.content) == usage
    rec = _records(proxy)[-1]
    assert rec["output_tokens"] == 5  # from usage, even when the client did not ask for it


def test_records_have_monotone_timestamps_and_accounting_is_released(make_proxy) -> None:
    proxy, client = make_proxy(policy="round_robin")
    for stream in (True, False, True):
        body = {"prompt": list(range(50)), "max_tokens": 3, "stream": stream}
        assert client.post("/v1/completions", json=body, headers={"x-request-id": "r"}).is_success
    assert _idle(proxy)
    recs = _records(proxy)
    assert len(recs) == 3 and all(r["request_id"] == "r" for r in recs)
    for r in recs:
        assert r["error"] is None and r["input_tokens"] == 50 and r["output_tokens"] == 3
        times = [r["t_proxy_recv"], r["t_prefill_sent"], r["t_first_token"], r["t_done"]]
        if r["t_first_token"] is None:  # non-streaming: no first-token time
            times.pop(2)
        assert times == sorted(times)
        assert r["e2e_s"] > 0
    assert recs[0]["ttft_s"] is not None and recs[1]["ttft_s"] is None


def test_in_flight_accounting_while_streaming(make_proxy, fakes: Fakes) -> None:
    proxy, client = make_proxy(policy="round_robin")
    body = {"prompt": list(range(64)), "max_tokens": 4, "stream": True,
            "fake_token_delay_s": 0.2}  # fmt: skip
    with client.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # first token is here
        inst = proxy.app.state.instances[int(r.headers["x-akvc-decode"])]
        assert inst.num_requests == 1
        assert inst.pending_prefill_tokens == 0  # released at first token
        assert inst.decode_requests == 1 and inst.decode_tokens == 64
        for _ in lines:
            pass
    assert _idle(proxy)


def test_bad_requests_get_openai_style_errors(make_proxy) -> None:
    proxy, client = make_proxy()
    cases = [
        (client.post("/v1/completions", content=b"{not json"), 400),
        (client.post("/v1/completions", json=[1, 2]), 400),
        (client.post("/v1/completions", json={"max_tokens": 3}), 400),
        (client.post("/v1/completions", json={"prompt": [1], "max_tokens": "x"}), 400),
        # an id beyond int64 in a full block (only full blocks are hashed)
        (client.post("/v1/completions", json={"prompt": [2**63, *range(15)]}), 400),
        # the same past the raw-prompt path's size (numpy alone would clamp it silently)
        (client.post("/v1/completions", json={"prompt": [2**63, *range(3_000)]}), 400),
        (client.get("/v1/completions"), 405),
        (client.get("/nope"), 404),
    ]
    for resp, status in cases:
        assert resp.status_code == status
        err = resp.json()["error"]
        assert err["code"] == status and err["message"]
    assert _idle(proxy)


def test_dead_engine_is_excluded_then_readmitted(make_proxy, fakes: Fakes) -> None:
    proxy, client = make_proxy(policy="round_robin")
    fake1, server1 = fakes[1]
    server1.stop()
    # Requests keep succeeding: a refused connection is retried on the other engine.
    for _ in range(4):
        r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
        assert r.status_code == 200 and r.headers["x-akvc-decode"] == "0"
    assert not proxy.app.state.instances[1].healthy
    health = client.get("/health").json()
    assert health["status"] == "ok" and "backends" not in health  # the old key is gone
    assert [(e["url"], e["healthy"]) for e in health["engines"]] == [
        (server.url, i == 0) for i, (_, server) in enumerate(fakes)
    ]
    text = client.get("/metrics").text
    assert f'akvc_proxy_engine_healthy{{instance="1",url="{server1.url}"}} 0.0' in text
    assert "akvc_proxy_backend" not in text
    assert _idle(proxy)
    restarted = ServerThread(fake1, port=server1.port).start()
    try:
        _wait_for(lambda: proxy.app.state.instances[1].healthy)
        used = {
            client.post("/v1/completions", json={"prompt": [1], "max_tokens": 1}).headers[
                "x-akvc-decode"
            ]
            for _ in range(4)
        }
        assert used == {"0", "1"}
    finally:
        restarted.stop()


def test_no_healthy_engine_is_a_clean_503(make_proxy, fakes: Fakes) -> None:
    proxy, client = make_proxy(policy="round_robin")
    for _, server in fakes:
        server.stop()
    r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
    assert r.status_code in (502, 503)
    assert "error" in r.json()
    r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
    assert r.status_code == 503
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "no healthy engine"
    assert _idle(proxy)
    assert all(rec["error"] for rec in _records(proxy))


def test_engine_dropping_mid_stream_ends_with_an_error_event(make_proxy, fakes: Fakes) -> None:
    proxy, client = make_proxy(policy="round_robin")
    body = {"prompt": list(range(20)), "max_tokens": 6, "stream": True, "fake_drop_after": 3}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e]
    assert len(events) == 5  # 3 tokens, the proxy's error, [DONE]
    assert json.loads(events[3].removeprefix("data: "))["error"]["code"] == 502
    assert events[4] == "data: [DONE]"
    rec = _records(proxy)[-1]
    assert rec["error"] and rec["t_first_token"] is not None
    # The drop is counted against the engine that served the stream.
    errors = [
        line
        for line in client.get("/metrics").text.splitlines()
        if line.startswith("akvc_proxy_engine_errors_total{")
    ]
    assert len(errors) == 1 and f'instance="{r.headers["x-akvc-decode"]}"' in errors[0]
    assert errors[0].endswith(" 1.0")
    assert _idle(proxy)
    # the engine is alive (it only dropped one connection): its probe readmits it
    _wait_for(lambda: all(i.healthy for i in proxy.app.state.instances))


def test_upstream_timeout_is_504_not_a_hang(make_proxy, fakes: Fakes) -> None:
    for fake, _ in fakes:
        fake.first_token_delay_s = 2.0
    proxy, client = make_proxy(policy="round_robin", upstream_timeout_s=0.3)
    t0 = time.monotonic()
    r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
    assert time.monotonic() - t0 < 1.5
    r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1, "stream": True})
    assert r.status_code == 504
    assert _idle(proxy)
    # a slow engine is not a dead one
    assert all(i.healthy for i in proxy.app.state.instances)


def test_metrics_page_counts_decisions_and_shows_fleet_state(make_proxy) -> None:
    proxy, client = make_proxy(policy="round_robin")
    for _ in range(3):
        client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 1})
    _wait_for(lambda: proxy.app.state.instances[0].engine_running is not None)
    text = client.get("/metrics").text
    decided = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('akvc_proxy_decisions_total{policy="round_robin",reason="round_robin"')
    ]
    assert sum(decided) == 3.0
    assert "akvc_proxy_overhead_seconds_count 3.0" in text
    assert 'akvc_proxy_engine_healthy{instance="1"' in text
    assert 'akvc_proxy_inflight_requests{instance="0"' in text
    assert 'akvc_proxy_engine_running{instance="0"' in text
    assert 'akvc_proxy_requests_total{endpoint="/v1/completions",outcome="ok"} 3.0' in text


def test_models_passes_through_from_a_healthy_engine(make_proxy) -> None:
    _, client = make_proxy()
    assert client.get("/v1/models").json()["data"][0]["id"] == "fake-model"


def test_text_prompts_are_tokenized_with_the_model_tokenizer(make_proxy, tiny_model) -> None:
    proxy, client = make_proxy(tokenizer=tiny_model)
    text = "the quick brown fox jumps over the lazy dog " * 8
    client.post("/v1/completions", json={"prompt": text, "max_tokens": 1})
    chat = {"messages": [{"role": "user", "content": text}], "max_tokens": 1}
    client.post("/v1/chat/completions", json=chat)
    from tokenizers import Tokenizer

    n = len(Tokenizer.from_file(str(tiny_model / "tokenizer.json")).encode(text).ids)
    recs = _records(proxy)
    assert recs[0]["input_tokens"] == n
    assert recs[1]["input_tokens"] > n  # the chat template adds role markers


@pytest.mark.parametrize("memo_mib", [256, 0])
def test_chat_turns_hash_as_their_whole_encode(make_proxy, tiny_model, memo_mib) -> None:
    """A chat session's turns, tokenized through the token memo or whole: the records' token
    counts and the router's predicted prefix hits are those of the whole encode."""
    from tokenizers import Tokenizer

    proxy, client = make_proxy(policy="test_most_cached", tokenizer=tiny_model,
                               token_memo_mib=memo_mib)  # fmt: skip
    tok = proxy.app.tokenizer
    whole = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    messages = [{"role": "system", "content": "You fix bugs in Python code. " * 30}]
    ids: list[list[int]] = []
    for turn in range(3):
        messages += [{"role": "user", "content": f"tool output {turn}: " + "x = 1\n" * 40}]
        body = {"messages": messages, "max_tokens": 1}
        r = client.post("/v1/chat/completions", json=body, headers={"x-session-id": "chat"})
        assert r.status_code == 200, r.text
        ids.append(whole.encode(tok.render_chat(messages), add_special_tokens=False).ids)
        messages += [{"role": "assistant", "content": f"reply {turn}"}]
    recs = _records(proxy)
    bs = proxy.app.block_size
    assert [r["input_tokens"] for r in recs] == [len(x) for x in ids]

    def shared(a: list[int], b: list[int]) -> int:
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        return bs * (min(n, len(b) - 1) // bs)

    assert [r["predicted_cached_tokens"] for r in recs] == [
        0, shared(ids[0], ids[1]), shared(ids[1], ids[2])
    ]  # fmt: skip
    assert (tok.memo.reused_tokens > 0) == (memo_mib > 0)


@pytest.mark.parametrize("memo_mib", [256, 0])
def test_long_token_prompts_are_forwarded_intact_and_hashed(
    make_proxy, fakes: Fakes, memo_mib: int
) -> None:
    # Bodies this large take the raw-prompt path (parse_request): the prompt is parsed into an
    # array for hashing and forwarded byte for byte, also when the proxy adds stream_options;
    # with the prompt memo on, a turn's JSON is read from where the last turn's ends.
    proxy, client = make_proxy(policy="test_most_cached", token_memo_mib=memo_mib)
    history = list(range(5_000, 8_000))  # ~20 KB of JSON
    for turn in range(3):
        history = history + list(range(20_000 + 500 * turn, 20_500 + 500 * turn))
        r = client.post(
            "/v1/completions",
            json={"prompt": history, "max_tokens": 2, "stream": turn == 1},
            headers={"x-session-id": "long"},
        )
        assert r.status_code == 200, r.text
    recs = _records(proxy)
    full = [16 * (n // 16) for n in (3_500, 4_000)]
    assert [r["predicted_cached_tokens"] for r in recs] == [0, *full]
    # the engine saw exactly the prompt the router hashed: its toy cache agrees token for token
    assert [r["cached_tokens"] for r in recs] == [0, *full]
    assert [r["input_tokens"] for r in recs] == [3_500, 4_000, 4_500]
    assert proxy.app.ids_memo.reused_tokens == (3_500 + 4_000 if memo_mib else 0)
    metrics = client.get("/metrics").text
    reused = 'akvc_proxy_prompt_memo_reused_total{memo="token_ids"} '
    assert f"{reused}{float(3_500 + 4_000 if memo_mib else 0)}" in metrics
    assert ('akvc_proxy_prompt_memo_bytes{memo="token_ids"} 0.0' in metrics) == (not memo_mib)


def test_chat_bodies_do_not_go_through_the_token_id_memo(make_proxy, fakes: Fakes) -> None:
    # The memo looks for a "prompt" list in the body: a chat body has none, and a search of a
    # long conversation cost milliseconds, so only /v1/completions consults it.
    proxy, client = make_proxy(policy="test_most_cached")
    ids = list(range(5_000, 8_000))
    assert client.post("/v1/completions", json={"prompt": ids, "max_tokens": 1}).status_code == 200
    assert len(proxy.app.ids_memo) == 1

    searched: list[int] = []
    parse = proxy.app.ids_memo.parse
    proxy.app.ids_memo.parse = lambda raw: searched.append(len(raw)) or parse(raw)  # type: ignore[method-assign]
    messages = [{"role": "user", "content": "x = [1, 2], {3: 4}, " * 500}]
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert searched == []
    r = client.post("/v1/completions", json={"prompt": [*ids, 1, 2], "max_tokens": 1})
    assert r.status_code == 200 and len(searched) == 1
    assert proxy.app.ids_memo.reused_tokens == len(ids)


def test_a_request_routed_while_another_waits_to_connect_sees_its_admission(fakes: Fakes) -> None:
    # A colocated request is admitted once it is written upstream (app._Admission); where it
    # must first open a connection, the admission must come before that wait, or the request
    # routed meanwhile decides without it. Two requests run in one loop, the first to the
    # pool's first connection: least_loaded's scores are the in-flight counts it saw.
    settings = ProxySettings(engines=[server.url for _, server in fakes], policy="least_loaded")
    app = ProxyApp(settings)
    for e in app.engines:
        e.open()
    added: list[RequestRecord] = []
    app.records.add = added.append  # type: ignore[method-assign]
    body = json.dumps({"prompt": list(range(32)), "max_tokens": 2}).encode()
    scope = {"type": "http", "path": "/v1/completions", "method": "POST", "headers": []}

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: object) -> None:
        return None

    async def main() -> None:
        await asyncio.gather(*(app._generate(scope, receive, send, scope["path"]) for _ in "ab"))
        for e in app.engines:
            await e.close()

    asyncio.run(main())
    assert [r.error for r in added] == [None, None]
    assert sorted(sum(r.scores.values()) for r in added) == [0, 1]
