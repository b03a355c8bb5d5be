"""A fake vLLM OpenAI server for the proxy's tests and overhead benchmark (no engine at all).

It speaks the parts of vLLM's API the proxy relies on, with vLLM's byte formats: SSE chunks
(`data: {...}\\n\\n`, a final usage chunk with empty `choices` when asked, `data: [DONE]`),
`/health`, `/v1/models`, and a `/metrics` page with the vLLM metric names the scraper reads.
A toy prefix cache reports `prompt_tokens_details.cached_tokens` like
`--enable-prompt-tokens-details` does.

Faults for tests are asked for in the request body (ignored by real vLLM, never sent by real
clients): `fake_drop_after: N` closes the connection after N content chunks;
`fake_token_delay_s` spaces tokens out.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentic_kvc.proxy.asgi import Receive, Scope, Send, run_lifespan


class FakeDrop(Exception):
    """Raised mid-response: uvicorn then closes the connection without ending the body."""


class FakeVLLM:
    def __init__(
        self,
        model: str = "fake-model",
        block_size: int = 16,
        first_token_delay_s: float = 0.0,
        token_delay_s: float = 0.0,
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.first_token_delay_s = first_token_delay_s
        self.token_delay_s = token_delay_s
        self.requests: list[dict[str, Any]] = []  # bodies received, in order
        self.running = 0
        self._seen_blocks: set[tuple[int, ...]] = set()
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.num_gpu_blocks: int | None = None  # stated in cache_config_info when set
        self.extra_metrics: list[str] = []  # more /metrics lines (e.g. an offload tier's info)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send)
            return
        path = scope["path"]
        if path == "/health":
            await _reply(send, 200, b"", b"text/plain")
        elif path == "/metrics":
            await _reply(send, 200, self.metrics_text().encode(), b"text/plain")
        elif path == "/v1/models":
            body = {"object": "list", "data": [{"id": self.model, "root": self.model}]}
            await _reply(send, 200, json.dumps(body).encode())
        elif path in ("/v1/completions", "/v1/chat/completions", "/v1/messages") or (
            path == "/v1/messages/count_tokens"
        ):
            raw = b""
            more = True
            while more:
                msg = await receive()
                raw += msg.get("body", b"")
                more = msg.get("more_body", False)
            if path == "/v1/messages":
                await self._messages(json.loads(raw), send)
            elif path == "/v1/messages/count_tokens":
                n_in = len(json.dumps(json.loads(raw).get("messages"))) // 4
                await _reply(send, 200, json.dumps({"input_tokens": n_in}).encode())
            else:
                await self._generate(path, json.loads(raw), send)
        else:
            await _reply(send, 404, b'{"error":"not found"}')

    def _cached_tokens(self, prompt: list[int]) -> int:
        """Toy prefix cache: full blocks whose whole prefix was seen before."""
        bs, hit = self.block_size, 0
        for end in range(bs, len(prompt) + 1, bs):
            key = tuple(prompt[:end])
            if key not in self._seen_blocks:
                self._seen_blocks.add(key)
                continue
            if hit == end - bs:
                hit = end
        self.prefix_queries += len(prompt)
        self.prefix_hits += hit
        return hit

    async def _generate(self, path: str, body: dict[str, Any], send: Send) -> None:
        self.requests.append(body)
        chat = path.endswith("chat/completions")
        prompt = body.get("prompt")
        ids = prompt if isinstance(prompt, list) else []
        n_prompt = len(ids) if ids else len(json.dumps(body.get("messages", prompt))) // 4
        cached = self._cached_tokens(ids) if ids else 0
        n_out = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        # Deterministic ids and times: the same request gives the same bytes, direct or proxied.
        rid = f"{'chatcmpl' if chat else 'cmpl'}-fake-{n_prompt}"
        usage = {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_out,
            "total_tokens": n_prompt + n_out,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        head = {"id": rid, "created": 1700000000, "model": self.model}
        self.running += 1
        try:
            if self.first_token_delay_s:
                await asyncio.sleep(self.first_token_delay_s)
            if not body.get("stream"):
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
                if chat:
                    choice["message"] = {"role": "assistant", "content": " tok" * n_out}
                else:
                    choice["text"] = " tok" * n_out
                obj = "chat.completion" if chat else "text_completion"
                out = {**head, "object": obj, "choices": [choice], "usage": usage}
                await _reply(send, 200, json.dumps(out).encode())
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
                }
            )
            await self._stream(send, head, chat, n_out, usage, body)
        finally:
            self.running -= 1

    async def _stream(
        self,
        send: Send,
        head: dict[str, Any],
        chat: bool,
        n_out: int,
        usage: dict[str, Any],
        body: dict[str, Any],
    ) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        drop_after = body.get("fake_drop_after")
        delay = float(body.get("fake_token_delay_s", self.token_delay_s))
        events: list[bytes] = []
        if chat:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            events.append(_event({**head, "object": obj, "choices": [role]}))
        for i in range(n_out):
            last = i == n_out - 1
            fin = "length" if last else None
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": " tok"}}
            else:
                choice = {"index": 0, "text": " tok"}
            choice["finish_reason"] = fin
            events.append(_event({**head, "object": obj, "choices": [choice]}))
        n_content = len(events)
        opts = body.get("stream_options") or {}
        if opts.get("include_usage"):
            events.append(_event({**head, "object": obj, "choices": [], "usage": usage}))
        events.append(b"data: [DONE]\n\n")
        for i, ev in enumerate(events):
            if drop_after is not None and i >= int(drop_after):
                raise FakeDrop("fake engine drops the connection mid-stream")
            # Like vLLM, the usage chunk and [DONE] follow the last token at once: pausing
            # before them would charge a proxy that asks for usage one extra token gap.
            if delay and 0 < i < n_content:
                await asyncio.sleep(delay)
            await send({"type": "http.response.body", "body": ev, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _messages(self, body: dict[str, Any], send: Send) -> None:
        """The Messages API, as vLLM answers it (a few events; usage in message_start and
        message_delta; no prefix cache: `cache_read_input_tokens` 0)."""
        self.requests.append(body)
        n_in = len(json.dumps(body.get("messages"))) // 4
        n_out = int(body.get("max_tokens") or 16)
        usage = {"input_tokens": n_in, "output_tokens": n_out, "cache_read_input_tokens": 0}
        msg = {"id": f"msg-fake-{n_in}", "type": "message", "role": "assistant",
               "model": self.model}  # fmt: skip
        if not body.get("stream"):
            content = [{"type": "text", "text": " tok" * n_out}]
            out = {**msg, "content": content, "stop_reason": "max_tokens", "usage": usage}
            await _reply(send, 200, json.dumps(out).encode())
            return
        start = {**msg, "content": [], "usage": {"input_tokens": n_in, "output_tokens": 0}}
        events = [("message_start", {"type": "message_start", "message": start})]
        for _ in range(n_out):
            delta = {"type": "text_delta", "text": " tok"}
            events.append(("content_block_delta", {"type": "content_block_delta",
                                                   "delta": delta, "index": 0}))  # fmt: skip
        stop = {"stop_reason": "max_tokens"}
        events.append(("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
        events.append(("message_stop", {"type": "message_stop"}))
        head = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        for name, obj in events:
            ev = f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n"
            await send({"type": "http.response.body", "body": ev.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def metrics_text(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        blocks = f',num_gpu_blocks="{self.num_gpu_blocks}"' if self.num_gpu_blocks else ""
        return "\n".join(
            [
                "# HELP vllm:num_requests_running Number of requests in model execution.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{labels}}} {float(self.running)}",
                f"vllm:num_requests_waiting{{{labels}}} 0.0",
                f"vllm:kv_cache_usage_perc{{{labels}}} {min(self.running / 100, 1.0)}",
                f"vllm:prefix_cache_queries_total{{{labels}}} {float(self.prefix_queries)}",
                f"vllm:prefix_cache_hits_total{{{labels}}} {float(self.prefix_hits)}",
                f'vllm:cache_config_info{{block_size="{self.block_size}",engine="0"{blocks}}} 1.0',
                *self.extra_metrics,
                "",
            ]
        )


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _reply(send: Send, status: int, body: bytes, ctype: bytes = b"application/json") -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main() -> None:
    """`python -m agentic_kvc.proxy.fake_engine --port P`: serve one fake (benchmarks)."""
    import argparse

    import uvicorn

    from agentic_kvc.proxy.server import bind_socket, uvicorn_config

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args()
    sock = bind_socket(args.host, args.port)
    print(f"fake vLLM on http://{args.host}:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn_config(FakeVLLM(block_size=args.block_size))).run(sockets=[sock])


if __name__ == "__main__":
    main()
