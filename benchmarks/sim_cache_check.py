"""Cache check: the simulator's LRU prefix-hit rate vs `kvcache-simulator` on a Mooncake trace.

kvcache-simulator (PyPI, installed in .venv-peers by `make peers`) replays a hash-id trace one
request at a time through a prefix trie with LRU leaf eviction and reports, per KV memory
budget, the hit rate over the last 50% of requests. Its budget in GiB becomes a number of
512-token blocks through the model's KV bytes per token; for llama-3.1-8b in bf16 that is
2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131,072 B/token, 64 MiB a block.
We replay the same trace through the simulator's `BlockPool` (sim/lru_check.py) with that
many blocks and compare. Pass: within 1 point at every budget.

    .venv/bin/python benchmarks/sim_cache_check.py --out results/bench/sim_cache_check.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.lru_check import lru_hit_rate, read_hash_trace

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
PEER = REPO / ".venv-peers" / "bin" / "kvcache-simulator"
BLOCK = 512
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # llama-3.1-8b, bf16
TOLERANCE_POINTS = 1.0


def run_peer(trace: Path, budgets: list[float]) -> dict:
    if not PEER.is_file():
        raise SystemExit(f"{PEER}: kvcache-simulator not installed (run `make peers`)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kvs.json"
        cmd = [
            str(PEER),
            "run",
            "--trace",
            str(trace),
            "--model",
            "llama-3.1-8b",
            "--block-size",
            str(BLOCK),
            "--budgets-gib",
            ",".join(map(str, budgets)),
            "--policies",
            "lru",
            "--format",
            "json",
            "--no-progress",
            "-o",
            str(out),
        ]
        subprocess.run(cmd, check=True)
        return json.loads(out.read_text())


def peer_version() -> str | None:
    out = subprocess.run(
        [str(PEER.parent / "pip"), "show", "kvcache-simulator"], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/sim_cache_check.json"))
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--budgets-gib", default="128,512,2048")
    args = ap.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"{args.trace}: no such trace")
    budgets = [float(b) for b in args.budgets_gib.split(",")]
    t0 = time.perf_counter()
    peer = run_peer(args.trace, budgets)
    peer_s = time.perf_counter() - t0
    meta = peer["metadata"]
    if meta["bytesPerToken"] != KV_BYTES_PER_TOKEN:
        raise SystemExit(
            f"kvcache-simulator uses {meta['bytesPerToken']} B/token, expected {KV_BYTES_PER_TOKEN}"
        )
    t0 = time.perf_counter()
    trace = read_hash_trace(args.trace, BLOCK)
    rows = []
    for point in peer["points"]:
        blocks = int(point["gib"] * 2**30 // (KV_BYTES_PER_TOKEN * BLOCK))
        if blocks != point["cacheBlocks"]:
            raise SystemExit(
                f"{point['gib']} GiB: we map to {blocks} blocks, the peer used "
                f"{point['cacheBlocks']}"
            )
        ours = lru_hit_rate(trace, blocks, warmup_fraction=meta["warmupFraction"])
        theirs = point["results"]["lru"]
        diff = 100 * (ours["hit_rate"] - theirs["hitRate"])
        rows.append(
            {
                "gib": point["gib"],
                "cache_blocks": blocks,
                "sim_hit_rate": ours["hit_rate"],
                "kvcache_simulator_hit_rate": theirs["hitRate"],
                "sim_hit_tokens": ours["hit_tokens"],
                "kvcache_simulator_hit_tokens": theirs["hitTokens"],
                "diff_points": diff,
                "pass": abs(diff) < TOLERANCE_POINTS,
            }
        )
        print(
            f"{point['gib']:>6} GiB = {blocks} blocks: sim {ours['hit_rate']:.4f} vs "
            f"kvcache-simulator {theirs['hitRate']:.4f} ({diff:+.3f} points)"
        )
    if len(rows) < len(budgets):
        print(f"kvcache-simulator omitted {len(budgets) - len(rows)} underfilled budget(s)")
    out = {
        "benchmark": "sim_cache_check",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "trace": args.trace.name,
            "model": "llama-3.1-8b",
            "block_size": BLOCK,
            "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
            "budgets_gib": budgets,
            "warmup_fraction": meta["warmupFraction"],
            "requests": meta["requestCount"],
            "tolerance_points": TOLERANCE_POINTS,
        },
        "peer": {
            "tool": "kvcache-simulator",
            "backend": meta.get("backend"),
            "wall_s": round(peer_s, 2),
        },
        "sim_wall_s": round(time.perf_counter() - t0, 2),
        "results": rows,
        "pass": bool(rows) and all(r["pass"] for r in rows),
    }
    atomic_write_json(args.out, out)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
