"""`akvc proxy --engine URL`: the proxy's upstream vLLM servers, and `--backend`, its old name.

The proxy calls the servers it routes to engines (`ProxySettings.engines`); `--backend` stays
a second name of the same option so scripts written before the rename keep running.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from agentic_kvc.proxy.cli import proxy
from agentic_kvc.proxy.settings import ProxySettings

A, B = "http://127.0.0.1:8001", "http://127.0.0.1:8002/"
ROLES = ["--role", "prefill", "--role", "decode"]


def _settings(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> ProxySettings:
    """The settings `akvc proxy ARGS` would serve with (the server itself is not started)."""
    seen: dict[str, ProxySettings] = {}
    monkeypatch.setattr(
        "agentic_kvc.proxy.server.run_proxy", lambda s, log_level: seen.setdefault("s", s)
    )
    r = CliRunner().invoke(proxy, args)
    assert r.exit_code == 0, r.output
    return seen["s"]


def test_backend_parses_to_the_same_settings_as_engine(monkeypatch) -> None:
    new = _settings(monkeypatch, ["--engine", A, "--engine", B, *ROLES])
    assert new.engines == [A, B.rstrip("/")] and new.roles == ["prefill", "decode"]
    old = _settings(monkeypatch, ["--backend", A, "--backend", B, *ROLES])
    # Both names feed one option, in command-line order.
    mixed = _settings(monkeypatch, ["--engine", A, "--backend", B, *ROLES])
    assert old == new and mixed == new
    swapped = _settings(monkeypatch, ["--backend", B, "--engine", A, *ROLES])
    assert swapped.engines == [B.rstrip("/"), A]


def test_an_engine_is_required_and_the_help_names_the_old_flag() -> None:
    r = CliRunner().invoke(proxy, [])
    assert r.exit_code == 2 and "--engine" in r.output
    help_text = " ".join(CliRunner().invoke(proxy, ["--help"]).output.split())  # unwrapped
    assert "--engine, --backend URL" in help_text and "old name" in help_text


def test_settings_take_engines_not_backends() -> None:
    assert ProxySettings(engines=[B]).engines == [B.rstrip("/")]
    with pytest.raises(TypeError):
        ProxySettings(backends=[A])  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="--engine"):
        ProxySettings(engines=["127.0.0.1:8001"])


def test_max_sessions_reaches_the_router_state(monkeypatch) -> None:
    from agentic_kvc.proxy.app import ProxyApp

    s = _settings(monkeypatch, ["--engine", A, "--max-sessions", "3"])
    assert s.max_sessions == 3
    assert ProxyApp(s).state.max_sessions == 3
    assert _settings(monkeypatch, ["--engine", A]).max_sessions == 65536
    with pytest.raises(ValueError, match="--max-sessions"):
        ProxySettings(engines=[A], max_sessions=0)


def test_a_port_in_use_is_one_line_naming_the_address() -> None:
    """vLLM's default port is 8000 too: the proxy on a taken port says so and exits 2,
    before building the app (no traceback)."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        r = CliRunner().invoke(proxy, ["--engine", A, "--host", "127.0.0.1", "--port", str(port)])
    finally:
        taken.close()
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert f"error: cannot listen on 127.0.0.1:{port}: " in r.output
    assert "pick another --port" in r.output


def test_a_port_out_of_range_is_a_usage_error() -> None:
    r = CliRunner().invoke(proxy, ["--engine", A, "--port", "99999"])
    assert r.exit_code == 2 and "--port" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--block-size", "0"], "--block-size"),
        (["--block-size", "-16"], "--block-size"),
        (["--scrape-interval", "-1"], "--scrape-interval"),
        (["--health-interval", "0"], "--health-interval"),
    ],
)
def test_impossible_sizes_and_intervals_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, args: list[str], option: str
) -> None:
    """Before: the proxy served with them (a zero health interval probes in a busy loop) or
    failed with a traceback after binding its port."""

    def served(_settings: object, log_level: str) -> None:
        raise AssertionError("the proxy was started")

    monkeypatch.setattr("agentic_kvc.proxy.server.run_proxy", served)
    r = CliRunner().invoke(proxy, ["--engine", A, "--port", "0", *args])
    assert r.exit_code == 2 and option in r.output and "Traceback" not in r.output


def test_static_pd_pools_beyond_the_engines_are_refused_before_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the proxy served, and every request failed in the policy's decision."""

    def served(_settings: object, log_level: str) -> None:
        raise AssertionError("the proxy was started")

    monkeypatch.setattr("agentic_kvc.proxy.server.run_proxy", served)
    pools = ["--policy", "static_pd", "--param", "prefill=[0]", "--param", "decode=[2]"]
    r = CliRunner().invoke(proxy, ["--engine", A, "--engine", B, *pools])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "static_pd pool indices [2] out of range for a fleet of 2 instances" in r.output
    ok = _settings(monkeypatch, ["--engine", A, "--engine", B, "--engine", A, *pools])
    assert ok.params == {"prefill": [0], "decode": [2]}


def test_token_memo_budget_reaches_the_tokenizer(monkeypatch, tiny_model) -> None:
    """`--token-memo-mib` defaults to the settings' default and sizes the tokenizer's memo;
    0 turns it off."""
    from agentic_kvc.proxy.app import ProxyApp

    tok = str(tiny_model)
    default = ProxySettings([A]).token_memo_mib
    assert _settings(monkeypatch, ["--engine", A]).token_memo_mib == default
    s = _settings(monkeypatch, ["--engine", A, "--tokenizer", tok, "--token-memo-mib", "3"])
    memo = ProxyApp(s).tokenizer.memo  # type: ignore[union-attr]
    assert memo.enabled and memo.budget_bytes == 3 << 20
    s = _settings(monkeypatch, ["--engine", A, "--tokenizer", tok, "--token-memo-mib", "0"])
    assert not ProxyApp(s).tokenizer.memo.enabled  # type: ignore[union-attr]
