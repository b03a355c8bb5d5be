"""Which HTTP protocol the proxy's uvicorn serves with: the head-holding subclass only on the
uvicorn releases it was tested against (it overrides uvicorn internals)."""

from __future__ import annotations

import pytest
import uvicorn

from agentic_kvc.proxy import server


def test_only_tested_uvicorn_releases_get_the_holding_protocol() -> None:
    installed = tuple(int(x) for x in uvicorn.__version__.split(".")[:2])
    assert server.holding_supported() == (installed in server.HOLDING_TESTED_UVICORN)
    assert server.holding_supported("0.54.0") and server.holding_supported("0.54.3")
    assert not server.holding_supported("0.55.0")
    assert not server.holding_supported("1.0.0")
    assert not server.holding_supported("x.y")


def test_an_untested_release_serves_with_uvicorns_own_httptools_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if server._http_impl() != "httptools":
        pytest.skip("needs httptools")
    monkeypatch.setattr(server, "holding_supported", lambda: False)
    assert server._http_protocol() == "httptools"
    monkeypatch.setattr(server, "holding_supported", lambda: True)
    proto = server._http_protocol()
    assert isinstance(proto, type) and proto.__name__ == "HoldingHttpToolsProtocol"
