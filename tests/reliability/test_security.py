"""Security posture: loopback binds, argv-only launches, redaction, paths inside the root."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentic_kvc.config import FleetConfig, load_config
from agentic_kvc.proxy.cli import proxy as proxy_cli
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.runs import execute
from agentic_kvc.security import (
    REDACTED,
    PathEscape,
    is_loopback,
    redact,
    redact_argv,
    warn_if_exposed,
    within_root,
)
from agentic_kvc.serve.launcher import plan_fleet
from agentic_kvc.serve.procs import ManagedProcess
from agentic_kvc.serve.services import ProxyProcess, RedisServer, redis_available

SRC = Path(__file__).resolve().parents[2] / "src" / "agentic_kvc"
LAUNCHERS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"}
SHELLS = {"system", "popen", "getoutput", "getstatusoutput", "create_subprocess_shell"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def test_no_process_is_started_through_a_shell() -> None:
    """Every subprocess launch in src/ passes an argument list; none uses a shell."""
    bad, launches = [], 0
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree):
            name, where = _name(call), f"{path.relative_to(SRC)}:{call.lineno}"
            if name in SHELLS and isinstance(call.func, ast.Attribute):
                owner = call.func.value
                if isinstance(owner, ast.Name) and owner.id in ("os", "subprocess", "asyncio"):
                    bad.append(f"{where}: {name}() runs a shell")
            for kw in call.keywords:
                if kw.arg == "shell" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    bad.append(f"{where}: shell={ast.unparse(kw.value)}")
            is_subprocess = isinstance(call.func, ast.Attribute) and (
                isinstance(call.func.value, ast.Name)
                and call.func.value.id in ("subprocess", "asyncio")
            )
            if is_subprocess and name in LAUNCHERS and call.args:
                launches += 1
                first = call.args[0]
                if isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp):
                    bad.append(f"{where}: command is a string: {ast.unparse(first)[:60]}")
    assert launches >= 3  # the scan sees the launches that exist (procs, runs, device)
    assert not bad, "\n".join(bad)


def test_every_server_binds_loopback_by_default(tiny_model: Path, tmp_path: Path) -> None:
    assert ProxySettings(engines=["http://127.0.0.1:1"]).host == "127.0.0.1"
    host_opt = next(p for p in proxy_cli.params if p.name == "host")
    assert host_opt.default == "127.0.0.1"
    argv = ProxyProcess(["http://127.0.0.1:1"], "round_robin", tmp_path).argv()
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv.count("--host") == 1
    for spec in plan_fleet(
        FleetConfig(instances=2, model=str(tiny_model), block_size=32), "cpu"
    ).specs:
        assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"
        assert spec.argv.count("--host") == 1 and spec.url.startswith("http://127.0.0.1:")
    if redis_available():
        argv = RedisServer(tmp_path).argv()
        assert argv[argv.index("--bind") + 1] == "127.0.0.1"


def test_listening_elsewhere_takes_an_option_and_warns(
    tiny_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with caplog.at_level(logging.WARNING):
        assert warn_if_exposed("0.0.0.0", "the proxy") is True
        assert warn_if_exposed("127.0.0.1", "the proxy") is False
    assert next(r.message for r in caplog.records if "the proxy" in r.message).startswith(
        "the proxy listens on 0.0.0.0"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        plan_fleet(
            FleetConfig(instances=1, model=str(tiny_model), block_size=32, vllm_args=["--host=::"]),
            "cpu",
        )
    assert any("vLLM instance 0" in r.message for r in caplog.records)


def test_proxy_cli_takes_the_api_key_from_the_environment(monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(
        "agentic_kvc.proxy.server.run_proxy", lambda s, log_level: seen.setdefault("s", s)
    )
    env = {"AKVC_PROXY_API_KEY": "k-from-env"}
    r = CliRunner().invoke(proxy_cli, ["--engine", "http://127.0.0.1:9"], env=env)
    assert r.exit_code == 0, r.output
    assert seen["s"].api_key == "k-from-env" and "k-from-env" not in repr(seen["s"])


def test_redaction_of_keys_values_and_argv() -> None:
    data = {
        "fleet": {"vllm_env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstu", "OMP": "1"}},
        "api_key": "sk-live-1234567890abcdef",
        "max_tokens": 16,
        "tokenizer": "/models/x",
        "header": "Bearer abc.def",
        "args": ["--api-key", "xyz", "--token=abc", "--port", "1"],
    }
    out = redact(data)
    text = json.dumps(out)
    for secret in ("hf_abcdef", "sk-live", "abc.def", "xyz", "--token=abc"):
        assert secret not in text
    assert out["max_tokens"] == 16 and out["tokenizer"] == "/models/x"
    assert out["fleet"]["vllm_env"] == {"HF_TOKEN": REDACTED, "OMP": "1"}
    assert redact_argv(["vllm", "--api-key", "k", "--port", "2"]) == [
        "vllm", "--api-key", REDACTED, "--port", "2",
    ]  # fmt: skip


def test_run_manifest_and_config_carry_no_secrets(tmp_path: Path) -> None:
    token = "hf_" + "Z" * 30
    cfg = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 2}},
            "fleet": {"vllm_env": {"HF_TOKEN": token}, "vllm_args": ["--api-key", "k123456"]},
        }
    )
    run_dir = execute(cfg, tmp_path)
    for f in run_dir.iterdir():
        if f.is_file():
            text = f.read_text()
            assert token not in text and "k123456" not in text, f.name
    assert execute(cfg, tmp_path) == run_dir  # still recognised as the same, complete run


def test_process_logs_carry_no_secrets(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    with ManagedProcess("t", ["true", "--api-key", "s3cr3t-value"], log) as p:
        p.popen.wait(5)  # type: ignore[union-attr]
    assert "s3cr3t-value" not in log.read_text() and REDACTED in log.read_text()


def test_paths_cannot_escape_their_root(tmp_path: Path) -> None:
    root = tmp_path / "results"
    root.mkdir()
    assert within_root(root, "runs", "abc") == (root / "runs" / "abc").resolve()
    for parts in (("..", "x"), ("/etc/passwd",), ("runs", "..", "..", "x")):
        with pytest.raises(PathEscape):
            within_root(root, *parts)
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(PathEscape):
        within_root(root, "link", "x")
