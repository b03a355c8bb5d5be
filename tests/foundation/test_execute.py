"""The run-directory contract: a complete run is reused, an incomplete one is redone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from foundation.fake_run_backend import CountingFakeBackend

from agentic_kvc.config import load_config
from agentic_kvc.io import read_jsonl
from agentic_kvc.metrics.summary import summarize
from agentic_kvc.runs import RUN_FILES, complete_runs, execute, is_complete


def test_second_execute_is_a_noop(
    tmp_path: Path, base_config: dict[str, Any], fake_run_backend: CountingFakeBackend
) -> None:
    cfg = load_config(base_config)
    first = execute(cfg, tmp_path, fake_run_backend)
    before = {f: (first / f).stat().st_mtime_ns for f in RUN_FILES}
    second = execute(load_config(base_config), tmp_path, fake_run_backend)
    assert first == second == tmp_path / "runs" / cfg.run_id()
    assert fake_run_backend.calls == 1
    assert {f: (first / f).stat().st_mtime_ns for f in RUN_FILES} == before


def test_changed_config_is_a_new_run(
    tmp_path: Path, base_config: dict[str, Any], fake_run_backend: CountingFakeBackend
) -> None:
    a = execute(load_config(base_config), tmp_path, fake_run_backend)
    b = execute(load_config(base_config, ["seed=3"]), tmp_path, fake_run_backend)
    assert a != b and fake_run_backend.calls == 2
    assert complete_runs(tmp_path) == sorted([a, b])


@pytest.mark.parametrize("damage", ["delete_requests", "manifest_incomplete", "stray_only"])
def test_incomplete_dir_is_redone(
    tmp_path: Path, base_config: dict[str, Any], fake_run_backend: CountingFakeBackend, damage: str
) -> None:
    cfg = load_config(base_config)
    run_dir = execute(cfg, tmp_path, fake_run_backend)
    records = list(read_jsonl(run_dir / "requests.jsonl"))
    if damage == "delete_requests":
        (run_dir / "requests.jsonl").unlink()
    elif damage == "manifest_incomplete":
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["complete"] = False
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    else:
        for f in RUN_FILES:
            (run_dir / f).unlink()
        (run_dir / "stray.tmp").write_text("half")
    assert not is_complete(run_dir)
    assert complete_runs(tmp_path) == []  # analysis never sees it
    execute(cfg, tmp_path, fake_run_backend)
    assert fake_run_backend.calls == 2
    assert is_complete(run_dir)
    assert not (run_dir / "stray.tmp").exists()
    # Deterministic backend: the redone run has the same records.
    assert list(read_jsonl(run_dir / "requests.jsonl")) == records


def test_backend_failure_leaves_incomplete_dir(tmp_path: Path, base_config: dict[str, Any]) -> None:
    def broken(config, run_dir):  # type: ignore[no-untyped-def]
        raise RuntimeError("server died")

    cfg = load_config(base_config)
    with pytest.raises(RuntimeError, match="server died"):
        execute(cfg, tmp_path, broken)
    run_dir = tmp_path / "runs" / cfg.run_id()
    assert run_dir.is_dir() and not is_complete(run_dir)
    assert complete_runs(tmp_path) == []


def test_manifest_and_summary_contents(
    tmp_path: Path, base_config: dict[str, Any], fake_run_backend: CountingFakeBackend
) -> None:
    cfg = load_config(base_config)
    run_dir = execute(cfg, tmp_path, fake_run_backend)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["run_id"] == cfg.run_id()
    assert manifest["config"] == cfg.canonical()
    assert json.loads((run_dir / "config.json").read_text()) == cfg.canonical()
    assert {"commit", "dirty"} <= set(manifest["git"])
    assert manifest["backend"] == "sim" and manifest["seed"] == 0
    assert manifest["hardware"]["cpu_count"] >= 1
    assert manifest["started_at"] <= manifest["finished_at"]
    records = list(read_jsonl(run_dir / "requests.jsonl"))
    assert manifest["n_requests"] == len(records) == 9  # 3 sessions x 3 turns
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(
        json.dumps(summarize(records))
    )
