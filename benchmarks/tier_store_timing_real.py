"""When a real vLLM host tier in lazy mode stores a block: at HBM eviction, or once freed.

The simulator's store-on-eviction tiers (`write_through: false`) write a block below HBM when HBM
evicts it. vLLM 0.32's SimpleCPUOffloadConnector in lazy mode (`_prepare_lazy_store_specs`,
v1/simple_kv_offload/manager.py) instead walks HBM's free queue from a cursor at every scheduler
step, up to `2 x ceil(max_num_batched_tokens / block_size)` blocks, and stores each cached block
the host pool lacks. The cursor persists between steps unless its block was taken again; so on a
free queue longer than one walk it may sweep on past the blocks eviction takes next, storing
blocks long before (or without) their eviction. The real engines here run with a walk longer than
their whole pool (8,192 batched tokens, 129 blocks), which hides the question.

This runs one tiny-model CPU engine whose walk is far shorter than its pool
(`--batched-tokens`, 64: a walk of 4 blocks of 129) and a host tier larger than its pool. Prompt A
(`--prompt-tokens`, 1,500: 46 blocks) runs and is freed, with room to spare in HBM; then short
fresh requests (1 block each, 4 output tokens) keep the scheduler stepping, never filling HBM.
After each one it reads, from the proxy's exact view (KV events), how many of A's blocks the host
tier holds and how many HBM still holds. Store-at-eviction predicts A never reaches the host
tier here; storing ahead of eviction predicts it does while HBM still holds all of it.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/tier_store_timing_real.py \
        --out results/bench/tier_store_timing_real.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tier_recency_real import (
    BLOCK,
    complete,
    engine_facts,
    engine_with_exact_view,
    facts_at_start,
    held,
    lazy_tier_engine,
    run_facts,
    settle,
    shape,
)

from agentic_kvc.cache.tier_store import lazy_walk_blocks
from agentic_kvc.io import atomic_write_json
from agentic_kvc.proxy.cache_view import make_hasher
from agentic_kvc.serve.host_copy_offload_connector import STORE_POLLS_ENV

SMALL = BLOCK + 8  # a short request: one full block (cached, later freed) and a partial one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=Path("models/tiny-qwen2"))
    ap.add_argument("--host-mib", type=float, default=13.0, help="host tier size (MiB)")
    ap.add_argument("--batched-tokens", type=int, default=64, help="--max-num-batched-tokens")
    ap.add_argument("--prompt-tokens", type=int, default=1500, help="prompt A's length")
    ap.add_argument("--small", type=int, default=30, help="short requests sent after A")
    ap.add_argument("--fill", type=int, default=4, help="prompts of A's length sent last")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--store-polls",
        type=int,
        default=0,
        help="CPU engine: report each store in flight to the worker's first N polls, as an "
        "asynchronous GPU copy (serve/host_copy_offload_connector.py)",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        help="cpu (host copies finish within their step), or cuda/auto on a GPU machine, where "
        "vLLM's own connector copies asynchronously and its cursor may restart more often",
    )
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"tier_store_timing_real: no model at {args.model} (run `make model`)")
    rng = random.Random(args.seed)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(100, 8000) for _ in range(n)]

    fleet_cfg = lazy_tier_engine(
        args.model, args.host_mib, max_num_batched_tokens=args.batched_tokens
    )
    hasher = make_hasher(BLOCK)
    a = prompt(args.prompt_tokens)
    keys_a = list(hasher.hash(None, a))
    n = len(keys_a)
    steps: list[dict[str, Any]] = []
    start = facts_at_start()
    logs = Path(tempfile.mkdtemp(prefix="akvc_tier_store_timing_"))
    env = {STORE_POLLS_ENV: str(args.store_polls)}
    with engine_with_exact_view(fleet_cfg, logs, args.device, env) as (proxy, model):

        def note(step: str) -> None:
            settle(proxy)
            host = held(proxy, keys_a, "host")
            row = {
                "step": step,
                "a_host": len(host),
                "a_host_shape": shape(host, n),
                "a_hbm": len(held(proxy, keys_a, "hbm")),
                "host_blocks": proxy.app.state.cache.blocks(0, "host"),
            }
            steps.append(row)
            print(
                f"{step:>8}: A in host {row['a_host']:3d} / {n} ({row['a_host_shape']}), in HBM"
                f" {row['a_hbm']:3d};"
                f" host tier holds {row['host_blocks']} blocks"
            )

        complete(proxy.url, model, a)
        note("A done")
        for i in range(args.small):
            complete(proxy.url, model, prompt(SMALL))
            note(f"small{i}")
        for i in range(args.fill):  # fresh prompts of A's length: HBM evicts A
            complete(proxy.url, model, prompt(args.prompt_tokens))
            note(f"fill{i}")

    ahead = [s for s in steps if s["a_host"] == n and s["a_hbm"] == n]
    out = {
        **run_facts("tier_store_timing_real", args, start),
        "engine": engine_facts(
            args.host_mib,
            max_num_batched_tokens=args.batched_tokens,
            lazy_walk_blocks=lazy_walk_blocks(args.batched_tokens, BLOCK),
            device=args.device,
            store_polls=args.store_polls,
        ),
        "prompt_blocks": n,
        "steps": steps,
        # The first reading at which the host tier held all of A while HBM still did.
        "stored_ahead_of_eviction_at": ahead[0]["step"] if ahead else None,
        "a_evicted_from_hbm": any(s["a_hbm"] < n for s in steps),
        # A's blocks in the host tier once HBM held none of it (None: HBM kept some).
        "a_host_after_eviction": next((s["a_host"] for s in steps if s["a_hbm"] == 0), None),
        "logs": str(logs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, out)
    print(json.dumps({k: out[k] for k in ("stored_ahead_of_eviction_at", "a_host_after_eviction")}))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
