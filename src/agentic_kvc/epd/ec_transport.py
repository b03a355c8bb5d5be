"""Encoder-cache transport, the design's push protocol: metadata E->PD, preallocation notices
PD->E, cache data E->PD (no vLLM engine loads it; `vllm_ec_connector` is the vLLM path).

`ECTransport` holds the logic shared by every transport: a send queue served by worker threads,
one receive loop per message kind, and the E side's bookkeeping (the design's `encoder_cache`,
`cache_to_send`, `cache_to_avoid`, `transferred_ids`). A transport implements six small
methods (`_send_*`, `_recv_*`); `RedisECTransport` does it with Redis lists, one list per
receiving instance and message kind, so several E and several PD instances share one server.

A transport failure (Redis gone) stops nothing silently: it is kept in `error`, passed to
`on_error`, and raised by `check()` as `ECTransportError` naming the server.
"""

from __future__ import annotations

import io
import json
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from agentic_kvc.epd.cache_manager import Key
from agentic_kvc.epd.preallocator import Metadata, Notice


class ECTransportError(RuntimeError):
    pass


def encode_array(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)  # .npy: no pickle, so no code runs on receive
    return buf.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def pack_message(header: dict[str, Any], payload: bytes) -> bytes:
    """A JSON header (4-byte big-endian length first) followed by raw payload bytes."""
    head = json.dumps(header).encode()
    return len(head).to_bytes(4, "big") + head + payload


def unpack_message(raw: bytes) -> tuple[dict[str, Any], bytes]:
    n = int.from_bytes(raw[:4], "big")
    return json.loads(raw[4 : 4 + n]), raw[4 + n :]


class ECTransport(ABC):
    """One instance's endpoint. `name` is its address for the others (e.g. "e0", "pd1")."""

    poll_s = 0.2

    def __init__(
        self,
        name: str,
        on_metadata: Callable[[Metadata], None] | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        on_cache: Callable[[str, int, np.ndarray], None] | None = None,
        on_error: Callable[[ECTransportError], None] | None = None,
        send_workers: int = 2,
    ) -> None:
        self.name = name
        self.on_metadata, self.on_cache, self.on_error = on_metadata, on_cache, on_error
        self._user_on_notice = on_notice
        self.error: ECTransportError | None = None
        self._stop = threading.Event()
        self._sendq: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.Queue()
        self._lock = threading.Lock()
        # E side (model runner) state, per the design.
        self.encoder_cache: dict[Key, tuple[np.ndarray, str]] = {}  # key -> (data, PD)
        self.cache_to_send: dict[Key, str] = {}  # accepted before the data existed: key -> PD
        self.cache_to_avoid: set[Key] = set()  # declined before the data existed
        self.transferred_ids: list[Key] = []  # sent or declined: the E scheduler frees these
        self.sent_ids: list[Key] = []  # data actually sent (tests: a decline sends nothing)
        self._threads: list[threading.Thread] = []
        self._send_workers = send_workers

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ECTransport:
        loops = [self._send_loop] * self._send_workers
        if self.on_metadata:
            loops.append(lambda: self._recv_loop(self._recv_metadata, self.on_metadata))
        loops.append(lambda: self._recv_loop(self._recv_notice, self._handle_notice))
        if self.on_cache:
            loops.append(lambda: self._recv_loop(self._recv_cache, self._handle_cache))
        for fn in loops:
            t = threading.Thread(target=fn, daemon=True, name=f"ec-{self.name}")
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        for _ in range(self._send_workers):
            self._sendq.put(None)
        for t in self._threads:
            t.join(timeout=5)

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    # -- E scheduler -------------------------------------------------------------------------
    def send_metadata(self, pd: str, meta: Metadata) -> None:
        self._sendq.put((self._send_metadata, (pd, meta)))

    # -- PD scheduler ------------------------------------------------------------------------
    def send_notice(self, notice: Notice) -> None:
        self._sendq.put((self._send_notice, (notice,)))

    # -- E model runner ----------------------------------------------------------------------
    def add_encoder_cache(self, req_id: str, input_id: int, data: np.ndarray, pd: str) -> None:
        """An embedding exists: send it now if PD already reserved space, drop it if PD
        declined, else keep it until the notice comes."""
        key = (req_id, input_id)
        with self._lock:
            if key in self.cache_to_avoid:
                self.cache_to_avoid.discard(key)
                self.transferred_ids.append(key)
            elif key in self.cache_to_send:
                self._queue_cache(key, data, self.cache_to_send.pop(key))
            else:
                self.encoder_cache[key] = (data, pd)

    def take_transferred_ids(self) -> list[Key]:
        with self._lock:
            out, self.transferred_ids = self.transferred_ids, []
            return out

    def _handle_notice(self, notice: Notice) -> None:
        with self._lock:
            key = notice.key
            if not notice.accepted:
                if self.encoder_cache.pop(key, None) is not None:
                    self.transferred_ids.append(key)
                else:
                    self.cache_to_avoid.add(key)
            elif key in self.encoder_cache:
                data, _ = self.encoder_cache.pop(key)
                self._queue_cache(key, data, notice.pd)
            else:
                self.cache_to_send[key] = notice.pd
        if self._user_on_notice:
            self._user_on_notice(notice)

    def _queue_cache(self, key: Key, data: np.ndarray, pd: str) -> None:
        def send() -> None:
            self._send_cache(pd, key, encode_array(data))
            with self._lock:
                self.transferred_ids.append(key)
                self.sent_ids.append(key)

        self._sendq.put((send, ()))

    def _handle_cache(self, item: tuple[Key, bytes]) -> None:
        (req_id, input_id), payload = item
        assert self.on_cache is not None
        self.on_cache(req_id, input_id, decode_array(payload))

    # -- loops -------------------------------------------------------------------------------
    def _fail(self, exc: Exception) -> None:
        err = exc if isinstance(exc, ECTransportError) else ECTransportError(f"{self.name}: {exc}")
        with self._lock:
            first = self.error is None
            self.error = self.error or err
        if first and self.on_error:
            self.on_error(err)

    def _send_loop(self) -> None:
        while True:
            item = self._sendq.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # a transport failure: reported, the loop goes on
                self._fail(exc)

    def _recv_loop(self, recv: Callable[[float], Any], handle: Callable[[Any], None]) -> None:
        while not self._stop.is_set():
            try:
                item = recv(self.poll_s)
            except Exception as exc:
                self._fail(exc)
                self._stop.wait(self.poll_s)
                continue
            if item is not None:
                handle(item)

    # -- transport ---------------------------------------------------------------------------
    @abstractmethod
    def _send_metadata(self, pd: str, meta: Metadata) -> None: ...

    @abstractmethod
    def _send_notice(self, notice: Notice) -> None: ...

    @abstractmethod
    def _send_cache(self, pd: str, key: Key, payload: bytes) -> None: ...

    @abstractmethod
    def _recv_metadata(self, timeout_s: float) -> Metadata | None: ...

    @abstractmethod
    def _recv_notice(self, timeout_s: float) -> Notice | None: ...

    @abstractmethod
    def _recv_cache(self, timeout_s: float) -> tuple[Key, bytes] | None: ...


class RedisECTransport(ECTransport):
    """Redis lists `epd:<kind>:<receiver>`; BLPOP with a short timeout so loops can stop."""

    def __init__(self, name: str, url: str, prefix: str = "epd", **kw: Any) -> None:
        import redis

        super().__init__(name, **kw)
        self.url, self.prefix = url, prefix
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

    def _key(self, kind: str, receiver: str) -> str:
        return f"{self.prefix}:{kind}:{receiver}"

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._errors as exc:
            raise ECTransportError(
                f"{self.name}: Redis at {self.url} unreachable ({type(exc).__name__}: {exc}); "
                "was redis-server stopped or restarted?"
            ) from exc

    def _send_metadata(self, pd: str, meta: Metadata) -> None:
        body = {"req_id": meta.req_id, "input_id": meta.input_id, "size": meta.size}
        body["source"] = meta.source
        self._call(self._redis.rpush, self._key("meta", pd), json.dumps(body))

    def _send_notice(self, notice: Notice) -> None:
        body = {
            "req_id": notice.req_id,
            "input_id": notice.input_id,
            "target": notice.target,
            "accepted": notice.accepted,
            "pd": notice.pd,
        }
        self._call(self._redis.rpush, self._key("notice", notice.target), json.dumps(body))

    def _send_cache(self, pd: str, key: Key, payload: bytes) -> None:
        msg = pack_message({"req_id": key[0], "input_id": key[1]}, payload)
        self._call(self._redis.rpush, self._key("cache", pd), msg)

    def _pop(self, kind: str, timeout_s: float) -> bytes | None:
        got = self._call(self._redis.blpop, [self._key(kind, self.name)], timeout_s)
        return None if got is None else got[1]

    def _recv_metadata(self, timeout_s: float) -> Metadata | None:
        raw = self._pop("meta", timeout_s)
        return None if raw is None else Metadata(**json.loads(raw))

    def _recv_notice(self, timeout_s: float) -> Notice | None:
        raw = self._pop("notice", timeout_s)
        return None if raw is None else Notice(**json.loads(raw))

    def _recv_cache(self, timeout_s: float) -> tuple[Key, bytes] | None:
        raw = self._pop("cache", timeout_s)
        if raw is None:
            return None
        head, payload = unpack_message(raw)
        return (head["req_id"], int(head["input_id"])), payload
