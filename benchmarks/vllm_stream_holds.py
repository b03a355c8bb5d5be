"""How often does a real vLLM CPU engine hold a whole stream and send it at the end?

On the project's 2-core host a tiny-model stream of 2,000 tokens sometimes arrives in one burst
when generation ends: the response head itself comes only then (found by the reliability test
of a kill mid-stream, docs/serving.md "Streams held whole"). A client's TTFT then measures the
whole generation. This benchmark streams `--tokens` tokens from each engine of a fleet of
`--instances`, all engines at once, `--rounds` times, and counts the streams whose head came
after `--hold-s`; with `--worker-nice N` / `--engine-core-nice N` the fleet's `VLLM::Worker`
(the model's compute) / `VLLM::EngineCore` (the scheduler) processes are reniced to N first
(on one instance a worker at nice 10 made the holds disappear).

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/vllm_stream_holds.py \\
        --instances 1 --out results/bench/vllm_stream_holds_1.json
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from agentic_kvc.config import FleetConfig
from agentic_kvc.io import atomic_write_json
from agentic_kvc.replay.client import completion_body
from agentic_kvc.runs import hardware_info
from agentic_kvc.serve.launcher import VllmFleet

REPO = Path(__file__).resolve().parents[1]


def renice(prefix: str, nice: int) -> list[int]:
    """Renice every thread of this process tree's processes named `prefix`... (vLLM names
    them: `VLLM::Worker`, the model's compute; `VLLM::EngineCore`, the scheduler); their pids.
    A negative value needs root."""
    done = []
    for ch in psutil.Process().children(recursive=True):
        if ch.name().startswith(prefix):
            for th in ch.threads():
                os.setpriority(os.PRIO_PROCESS, th.id, nice)
            done.append(ch.pid)
    return done


def stream(url: str, model: str, prompt: list[int], tokens: int) -> dict[str, float]:
    """One streamed completion: when its head, first and last token events came (s)."""
    body = completion_body(model, prompt, tokens, None)
    t0 = time.monotonic()
    events: list[float] = []
    with httpx.Client(timeout=300) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        head = time.monotonic() - t0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                events.append(time.monotonic() - t0)
    return {"head_s": head, "first_s": events[0], "last_s": events[-1], "events": len(events)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--hold-s", type=float, default=1.0, help="a head later than this is a hold")
    ap.add_argument("--worker-nice", type=int, default=None)
    ap.add_argument("--engine-core-nice", type=int, default=None)
    ap.add_argument("--model", default=str(REPO / "models" / "tiny-qwen2"))
    ap.add_argument("--logs", type=Path, default=Path("/tmp/akvc_stream_holds"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cfg = FleetConfig(instances=args.instances, model=args.model, block_size=32, max_num_seqs=16)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with VllmFleet.from_config(cfg, args.logs, device="cpu", startup_timeout_s=400) as fleet:
        reniced = {
            name: renice(name, value)
            for name, value in (
                ("VLLM::Worker", args.worker_nice),
                ("VLLM::EngineCore", args.engine_core_nice),
            )
            if value is not None
        }
        for rnd in range(args.rounds):
            threads = []
            for i, url in enumerate(fleet.urls):
                prompt = list(range(300 + 7 * rnd + i, 364 + 7 * rnd + i))  # no prefix reuse

                def run(
                    url: str = url, i: int = i, prompt: list[int] = prompt, rnd: int = rnd
                ) -> None:
                    rows.append(
                        {
                            "round": rnd,
                            "instance": i,
                            **stream(url, fleet.model_name, prompt, args.tokens),
                        }
                    )

                threads.append(threading.Thread(target=run))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(f"round {rnd}: heads {[round(r['head_s'], 2) for r in rows[-args.instances :]]}")
    holds = [r for r in rows if r["head_s"] > args.hold_s]
    out = {
        "benchmark": "vllm_stream_holds",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "reniced_pids": reniced,
        "streams": sorted(rows, key=lambda r: (r["round"], r["instance"])),
        "held": len(holds),
        "of": len(rows),
    }
    atomic_write_json(args.out, out)
    last = [round(r["last_s"], 1) for r in out["streams"]]
    print(
        f"held whole: {len(holds)} of {len(rows)} (worker nice {args.worker_nice}, engine core "
        f"nice {args.engine_core_nice}); last token per round and instance: {last}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
