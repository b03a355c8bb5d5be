"""Does a real vLLM lazy host tier store a finished prompt's blocks when a waiting request takes
them at once? (the likely cause of the estimated view's over-expectation, docs/kv_tiers_real.md
section 8)

vLLM 0.32 allocates a step's blocks (`Scheduler.schedule` -> `allocate_slots`) before the lazy
walk runs (`build_connector_meta` -> `_prepare_lazy_store_specs`), and a finished request frees
its blocks after the model runs. So when request B is waiting for blocks while A decodes, the
step after A finishes gives A's freed blocks to B before the walk can store them. The router's
model (and the simulator's "store at free" bound) stores every freed block.

One tiny-model CPU engine, 129 blocks of HBM, a lazy host tier larger than the pool, KV events
read by the proxy's exact view. Per repeat, two fresh prompts A and B of `--prompt-tokens` each
(90 blocks by default: both cannot be in HBM at once):
- `sequential`: B is sent after A's response (the engine runs one more step for A's finish,
  whose walk stores A before B arrives);
- `waiting`: B is sent while A decodes (`--a-output` tokens), so B waits for A's blocks.
Reads how many of A's blocks the host tier holds once the events settle. Store at free predicts
all of A in both; the step order predicts a shortfall in `waiting` only (confirmed with
`--trace`, which reads from the engine's steps whether B really waited: docs/kv_tiers_real.md).

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/tier_store_race_real.py \\
        --out results/bench/tier_store_race_real.json
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tier_recency_real import (
    BLOCK,
    HTTP,
    complete,
    engine_facts,
    engine_with_exact_view,
    facts_at_start,
    held,
    lazy_tier_engine,
    run_facts,
    settle,
)
from vllm_step_trace import read_trace, trace_env

from agentic_kvc.io import atomic_write_json
from agentic_kvc.metrics.prometheus import parse_vllm_metrics
from agentic_kvc.proxy.cache_view import make_hasher


def preemptions(url: str) -> float:
    """The engine's preemption counter (vllm:num_preemptions_total)."""
    text = HTTP.get(url + "/metrics", timeout=10).text
    return parse_vllm_metrics(text).preemptions or 0.0


def step_reading(
    events: list[dict[str, Any]], a_id: str, b_id: str, a_blocks: int
) -> dict[str, Any]:
    """What the engine's step trace says happened to A's prompt blocks between A's release and
    B's admission: how many the lazy walk stored first, how many B took unstored, and the
    scheduler calls in between (each one's walk could store them)."""
    i_free = next(i for i, e in enumerate(events) if e["ev"] == "free" and e["req"] == a_id)
    prompt = events[i_free]["blocks"][:a_blocks]
    b_tries = [i for i, e in enumerate(events) if e["ev"] == "alloc" and e["req"] == b_id]
    i_admit = next(i for i in b_tries if events[i]["ok"])
    stored: set[int] = set()
    for e in events[i_free:i_admit]:
        if e["ev"] == "store":
            stored.update(e["gpu"])
    taken = set(events[i_admit]["blocks"])
    between = [e for e in events[i_free:i_admit] if e["ev"] == "schedule"]
    return {
        "b_failed_tries": sum(1 for i in b_tries if not events[i]["ok"]),
        "b_admitted_after_a_freed": i_admit > i_free,
        "schedule_calls_between": len(between),
        "a_stored_before_b_admitted": sum(1 for blk in prompt if blk in stored),
        "a_taken_unstored_by_b": sum(1 for blk in prompt if blk in taken and blk not in stored),
    }


def full_adds(events: list[dict[str, Any]], prompt_tokens: int) -> list[str]:
    """Engine ids of the requests with `prompt_tokens` tokens (A and B), in arrival order."""
    return [e["req"] for e in events if e["ev"] == "add" and e["prompt"] == prompt_tokens]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=Path("models/tiny-qwen2"))
    ap.add_argument("--prompt-tokens", type=int, default=90 * BLOCK)
    ap.add_argument("--a-output", type=int, default=64, help="A's output tokens (its decode time)")
    ap.add_argument(
        "--b-delay-s", type=float, default=0.5, help="`waiting`: B sent this long after A"
    )
    ap.add_argument("--host-mib", type=float, default=64.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--direct",
        action="store_true",
        help="send A and B to the engine itself, not through the proxy (whose exact view reads "
        "the engine's KV events either way)",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="trace the engine's block traffic (benchmarks/vllm_step_trace.py) and read, per "
        "row, what its steps did with A's blocks",
    )
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"tier_store_race_real: no model at {args.model} (run `make model`)")
    rng = random.Random(0)
    hasher = make_hasher(BLOCK)
    fleet_cfg = lazy_tier_engine(args.model, args.host_mib)
    rows: list[dict[str, Any]] = []
    start = facts_at_start()
    logs = Path(tempfile.mkdtemp(prefix="akvc_tier_store_race_"))
    trace = logs / "trace"
    env = trace_env(trace) if args.trace else None
    with engine_with_exact_view(fleet_cfg, logs, env=env) as (proxy, model):
        engine_url = proxy.app.settings.engines[0]
        send_to = engine_url if args.direct else proxy.url

        def run_a(prompt: list[int], done: list[float]) -> None:
            complete(send_to, model, prompt, args.a_output, ignore_eos=True)
            done.append(time.monotonic())

        for rep in range(args.repeats):
            for mode in ("sequential", "waiting") if rep % 2 == 0 else ("waiting", "sequential"):
                a = [rng.randrange(100, 8000) for _ in range(args.prompt_tokens)]
                b = [rng.randrange(100, 8000) for _ in range(args.prompt_tokens)]
                keys_a = list(hasher.hash(None, a))
                preempted_before = preemptions(engine_url)
                a_done: list[float] = []
                if mode == "sequential":
                    run_a(a, a_done)
                else:
                    t = threading.Thread(target=run_a, args=(a, a_done))
                    t.start()
                    time.sleep(args.b_delay_s)
                b_sent = time.monotonic()
                complete(send_to, model, b, ignore_eos=True)
                if mode == "waiting":
                    t.join()
                settle(proxy, 1.0)
                row = {
                    "repeat": rep,
                    "mode": mode,
                    # B waited for A's blocks only if it was sent before A's response came.
                    "b_sent_before_a_done": b_sent < a_done[0],
                    # Whether B was admitted in part and preempted while A decoded.
                    "preemptions": preemptions(engine_url) - preempted_before,
                    "a_blocks": len(keys_a),
                    "a_host": len(held(proxy, keys_a, "host")),
                    "a_hbm": len(held(proxy, keys_a, "hbm")),
                }
                rows.append(row)
                print(row, flush=True)
    if args.trace:
        events = read_trace(trace)
        ids = full_adds(events, args.prompt_tokens)
        for k, row in enumerate(rows):
            row["steps"] = step_reading(events, ids[2 * k], ids[2 * k + 1], row["a_blocks"])
            print(row["mode"], row["a_host"], row["steps"], flush=True)
        print(f"trace: {trace}")
    out = {
        **run_facts("tier_store_race_real", args, start),
        "engine": engine_facts(args.host_mib),
        "results": rows,
    }
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
