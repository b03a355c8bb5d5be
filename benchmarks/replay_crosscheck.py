"""Cross-check `akvc replay` timing against an independent client, NVIDIA `aiperf`.

One real vLLM instance (CPU, tiny model) serves both clients. The workload is a small agentic
one from the project's generator, replayed open loop: every request is sent at its own
arrival time. Both clients send byte-for-byte the same request bodies (token-id prompts,
`max_tokens` = the workload's output length, `ignore_eos`) at the same offsets: ours from the
workload, aiperf's from a Mooncake-format trace whose lines carry the verbatim `payload` and
`timestamp` (`--fixed-schedule`). The prefix cache is reset before every pass (vLLM's dev
endpoint), and the passes alternate (akvc, aiperf, akvc, aiperf, ...) so drift on the shared
machine hits both alike. Both clients run pinned to the core(s) the engine's threads are not
bound to, aiperf with one worker and one record processor. The claim checked: TTFT and E2E
p50 agree within 10%.

    .venv/bin/python benchmarks/replay_crosscheck.py --out results/bench/replay_crosscheck.json

Needs `.venv-peers/bin/aiperf` (`make peers`) and the tiny model (`make model`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agentic_kvc.config import FleetConfig, GeneratorConfig, WorkloadConfig
from agentic_kvc.replay.client import completion_body
from agentic_kvc.replay.driver import ReplaySettings, replay_async
from agentic_kvc.replay.prompts import token_fn
from agentic_kvc.runs import hardware_info, package_versions
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.model import Workload

REPO = Path(__file__).resolve().parents[1]
AIPERF = REPO / ".venv-peers" / "bin" / "aiperf"
TOKENIZER_ID = "local/tiny-qwen2"  # aiperf's tokenizer name inside our private HF cache


def build_workload(sessions: int, seed: int, time_scale: float) -> Workload:
    cfg = WorkloadConfig(
        generator=GeneratorConfig(
            preset="agentic-coding",
            sessions=sessions,
            params={
                "session_rate_per_s": 1.0,
                "max_turns": 4,
                "max_context_tokens": 30000,
                "output_max_tokens": 1000,
            },
        ),
        mode="open",
        token_scale=0.1,  # fit the tiny model's 4,096-token context
        max_input_tokens=3000,
        time_scale=time_scale,
    )
    return load_workload(cfg, seed)


def hf_cache_with_tokenizer(model_dir: Path, root: Path) -> Path:
    """An HF_HOME whose hub cache holds the tiny model's tokenizer as `local/tiny-qwen2`.

    aiperf loads tokenizers by hub name; offline, a name resolves only through the cache
    layout (models--ORG--NAME/snapshots/REV + refs/main).
    """
    repo = root / "hub" / ("models--" + TOKENIZER_ID.replace("/", "--"))
    snap = repo / "snapshots" / "0"
    snap.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, snap / name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text("0")
    return root


def write_mooncake_trace(wl: Workload, bodies: dict[str, dict[str, Any]], path: Path) -> None:
    """One line per request: the exact body our replayer sends, at its arrival (ms)."""
    with path.open("w") as fh:
        for req in wl.requests():
            line = {
                "timestamp": round(req.arrival_s * 1000.0, 3),
                "payload": bodies[req.request_id],
            }
            fh.write(json.dumps(line) + "\n")


def reset_prefix_cache(url: str) -> None:
    # A pass must not find the previous pass's prompts cached; nothing is running in between.
    for _ in range(20):
        r = httpx.post(url + "/reset_prefix_cache", timeout=30)
        if r.status_code == 200 and r.json().get("success", True) is not False:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{url}/reset_prefix_cache kept failing: {r.status_code} {r.text[:200]}")


def run_akvc(url: str, model: str, wl: Workload, tokens: Any) -> list[dict[str, float]]:
    settings = ReplaySettings(
        target=url, model=model, mode="open", time_scale=1.0, timeout_s=300, progress=False
    )
    recs = asyncio.run(replay_async(wl, settings, tokens))
    errors = [r.error for r in recs if r.error]
    if errors:
        raise RuntimeError(f"akvc replay: {len(errors)} failed requests, first: {errors[0]}")
    return [{"ttft_s": r.ttft_s, "e2e_s": r.e2e_s} for r in recs]  # type: ignore[misc]


def run_aiperf(
    url: str, model: str, trace: Path, art: Path, hf_home: Path
) -> list[dict[str, float]]:
    env = {
        **os.environ,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    cmd = [
        str(AIPERF),
        "profile",
        "--model",
        model,
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--custom-dataset-type",
        "mooncake_trace",
        "--input-file",
        str(trace),
        "--fixed-schedule",
        "--fixed-schedule-auto-offset",
        "--tokenizer",
        TOKENIZER_ID,
        "--use-server-token-count",
        "--output-artifact-dir",
        str(art),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--no-auto-plot",
        "--export-level",
        "records",
        # One worker and one record processor: fewer processes competing for the client core.
        "--workers-max",
        "1",
        "--record-processor-service-count",
        "1",
    ]
    log = art.parent / f"{art.name}.log"
    art.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=600)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"aiperf exited {proc.returncode}; log {log}:\n{tail}")
    return aiperf_records(art)


def aiperf_records(art: Path) -> list[dict[str, float]]:
    """Per-request TTFT and request latency (seconds) from aiperf's per-record export."""
    files = sorted(art.rglob("profile_export*.jsonl"))
    files = [f for f in files if "raw" not in f.name] or files
    if not files:
        raise RuntimeError(f"no aiperf per-record export under {art}")
    out = []
    for line in files[0].read_text().splitlines():
        row = json.loads(line)
        metrics = row.get("metrics") or {}
        if row.get("error") or "time_to_first_token" not in metrics:
            raise RuntimeError(f"aiperf record without TTFT or with an error: {line[:300]}")
        out.append(
            {
                "ttft_s": _ms(metrics["time_to_first_token"]) / 1e3,
                "e2e_s": _ms(metrics["request_latency"]) / 1e3,
            }
        )
    return out


def _ms(metric: Any) -> float:
    value, unit = (
        (metric["value"], metric.get("unit", "ms")) if isinstance(metric, dict) else (metric, "ms")
    )
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return float(value) * scale


def pcts(rows: list[dict[str, float]], key: str) -> dict[str, float]:
    a = np.asarray([r[key] for r in rows]) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p90_ms": float(np.percentile(a, 90)),
        "n": len(a),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "results/bench/replay_crosscheck.json")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-scale", type=float, default=0.5, help="workload time multiplier")
    ap.add_argument("--passes", type=int, default=3, help="passes per client (alternating)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    args = ap.parse_args()
    if not AIPERF.exists():
        sys.exit(f"{AIPERF} missing: run `make peers`")

    wl = build_workload(args.sessions, args.seed, args.time_scale)
    work = Path(tempfile.mkdtemp(prefix="akvc_crosscheck_"))
    fleet_cfg = FleetConfig(instances=1, model="tiny", block_size=32, max_num_seqs=64)
    t0 = time.time()
    passes: dict[str, list[list[dict[str, float]]]] = {"akvc": [], "aiperf": []}
    with VllmFleet.from_config(
        fleet_cfg,
        work / "logs",
        device="cpu",
        per_instance_env=[{"VLLM_SERVER_DEV_MODE": "1"}],  # for /reset_prefix_cache
    ) as fleet:
        url, model = fleet.urls[0], fleet.model_name
        tokens = token_fn(Path(fleet.plan.model))
        bodies = {
            r.request_id: completion_body(model, tokens(r), r.output_tokens, r.session_id)
            for r in wl.requests()
        }
        trace = work / "trace.jsonl"
        write_mooncake_trace(wl, bodies, trace)
        hf_home = hf_cache_with_tokenizer(Path(fleet.plan.model), work / "hf")
        # Both clients run on the cores the engine is not pinned to (aiperf inherits this
        # process's affinity): a client that steals the engine's core slows decoding and
        # would make the two clients disagree for a reason that is not timing.
        engine_core = fleet.plan.specs[0].core
        client_cores = set(os.sched_getaffinity(0)) - {engine_core}
        if client_cores:
            os.sched_setaffinity(0, client_cores)
        # Warm-up: first requests after start pay one-off costs neither client should see.
        warm = build_workload(2, args.seed + 1, 0.01)
        asyncio.run(replay_async(warm, ReplaySettings(url, model, progress=False), tokens))
        for k in range(args.passes):
            reset_prefix_cache(url)
            passes["akvc"].append(run_akvc(url, model, wl, tokens))
            print(f"pass {k + 1}: akvc done", file=sys.stderr)
            reset_prefix_cache(url)
            passes["aiperf"].append(run_aiperf(url, model, trace, work / f"aiperf{k}", hf_home))
            print(f"pass {k + 1}: aiperf done", file=sys.stderr)
        fleet_desc = fleet.describe()

    results: dict[str, Any] = {}
    for client, runs in passes.items():
        pooled = [row for run in runs for row in run]
        results[client] = {
            "ttft": pcts(pooled, "ttft_s"),
            "e2e": pcts(pooled, "e2e_s"),
            "per_pass": [{"ttft": pcts(r, "ttft_s"), "e2e": pcts(r, "e2e_s")} for r in runs],
        }
    agreement = {}
    for metric in ("ttft", "e2e"):
        ours, theirs = results["akvc"][metric]["p50_ms"], results["aiperf"][metric]["p50_ms"]
        rel = abs(ours - theirs) / theirs
        agreement[f"{metric}_p50_rel_diff"] = rel
        agreement[f"{metric}_p50_within_tolerance"] = bool(rel <= args.tolerance)
    aiperf_version = subprocess.run(
        [str(REPO / ".venv-peers/bin/python"), "-c", "import aiperf; print(aiperf.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    report = {
        "benchmark": "replay_crosscheck",
        "command": " ".join([sys.executable, *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(time.time() - t0, 1),
        "machine": hardware_info(),
        "versions": {
            **package_versions(),
            "aiperf": aiperf_version,
            "python": platform.python_version(),
        },
        "parameters": vars(args) | {"out": str(args.out)},
        "workload": {
            "sessions": len(wl.sessions),
            "requests": len(wl),
            "input_tokens_total": sum(r.input_tokens for r in wl.requests()),
            "output_tokens_total": sum(r.output_tokens for r in wl.requests()),
            "mode": "open (both clients send at the workload's arrival times)",
        },
        "fleet": fleet_desc,
        "client_cores": sorted(client_cores),
        "results": results,
        "agreement": agreement | {"tolerance": args.tolerance},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    for client in ("akvc", "aiperf"):
        r = results[client]
        print(
            f"{client:7} TTFT p50 {r['ttft']['p50_ms']:8.1f} ms  "
            f"E2E p50 {r['e2e']['p50_ms']:8.1f} ms  (n={r['ttft']['n']})"
        )
    print(json.dumps(agreement))
    print(f"wrote {args.out}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
