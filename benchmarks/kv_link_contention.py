"""Do KV reloads queue on the host link, and do they slow the engine's steps? (issue 29)

The simulator prices a tier reload as a transfer on the instance's host->device link, queued
FIFO behind the link's earlier transfers, while the engine keeps stepping its other requests at
full speed (docs/kv_tiers.md, "What the simulator models"). Two assumptions in that, measured
here on a real GPU with KV-block-shaped copies from pinned host memory:

1. **The link is one queue.** Two host->device copies started together on two CUDA streams:
   FIFO says the first ends after t and the second after 2t; fair sharing says both end near
   2t. Either way the pair takes ~2t (one link): the simulator's FIFO keeps the total and the
   order. And a device->host copy beside a host->device one: PCIe is full duplex, so each
   should take about its time alone (the simulator gives each direction its own link).
2. **Steps go on at full speed.** A bf16 matrix-multiply loop (standing in for a step's
   kernels) timed alone and while host->device copies run on another stream: the loop's
   slowdown and the copies' slowdown.

    python benchmarks/kv_link_contention.py --out results/bench/kv_link_contention.json

Needs PyTorch with CUDA; on a machine without one it says so and exits 2. About a minute on an
H200.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from gpu_bench import cuda_torch, environment

BLOCK_BYTES = 48 * 2 * 16 * 4 * 128 * 2  # Qwen3-Coder-30B-A3B, one 16-token block, bf16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/kv_link_contention.json"))
    ap.add_argument("--blocks", default="64,256,1024", help="copy sizes in KV blocks")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--matmul", type=int, default=8192, help="square bf16 matmul side")
    args = ap.parse_args()
    found = cuda_torch("kv_link_contention")
    if found is None:
        return 2
    torch, dev = found
    sizes = [int(b) for b in args.blocks.split(",")]
    top = max(sizes) * BLOCK_BYTES
    host = [torch.empty(top, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    gpu = [torch.empty(top, dtype=torch.uint8, device=dev) for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(3)]

    def timed(jobs: list[tuple[int, Any]]) -> list[float]:
        """Start `jobs` (stream index, callable) together; seconds from the common start to
        each one's end."""
        start = torch.cuda.Event(enable_timing=True)
        ends = [torch.cuda.Event(enable_timing=True) for _ in jobs]
        torch.cuda.synchronize()
        start.record(torch.cuda.current_stream())
        for (k, job), end in zip(jobs, ends, strict=True):
            s = streams[k]
            s.wait_event(start)
            with torch.cuda.stream(s):
                job()
                end.record(s)
        torch.cuda.synchronize()
        return [start.elapsed_time(e) / 1e3 for e in ends]

    def median_of(jobs: list[tuple[int, Any]]) -> list[float]:
        timed(jobs)  # warm-up
        runs = [timed(jobs) for _ in range(args.repeats)]
        return [statistics.median(r[i] for r in runs) for i in range(len(jobs))]

    def h2d(i: int, n: int) -> Any:
        return lambda: gpu[i][:n].copy_(host[i][:n], non_blocking=True)

    def d2h(i: int, n: int) -> Any:
        return lambda: host[i][:n].copy_(gpu[i][:n], non_blocking=True)

    out: dict[str, Any] = {
        "benchmark": "kv_link_contention",
        **environment(torch),
        "block_bytes": BLOCK_BYTES,
        "repeats": args.repeats,
        "sizes": [],
    }
    for b in sizes:
        n = b * BLOCK_BYTES
        solo_h2d = median_of([(0, h2d(0, n))])[0]
        solo_d2h = median_of([(0, d2h(0, n))])[0]
        pair = median_of([(0, h2d(0, n)), (1, h2d(1, n))])
        duplex = median_of([(0, h2d(0, n)), (1, d2h(1, n))])
        row = {
            "blocks": b,
            "bytes": n,
            "h2d_alone_s": solo_h2d,
            "d2h_alone_s": solo_d2h,
            "two_h2d_ends_s": sorted(pair),
            "two_h2d_total_over_alone": max(pair) / solo_h2d,
            "two_h2d_first_over_alone": min(pair) / solo_h2d,
            "duplex_h2d_over_alone": duplex[0] / solo_h2d,
            "duplex_d2h_over_alone": duplex[1] / solo_d2h,
        }
        out["sizes"].append(row)
        print(json.dumps(row), flush=True)

    m = args.matmul
    a = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    w = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    c = torch.empty(m, m, device=dev, dtype=torch.bfloat16)

    def matmuls(k: int) -> Any:
        def run() -> None:
            for _ in range(k):
                torch.mm(a, w, out=c)

        return run

    n = max(sizes) * BLOCK_BYTES
    copy_s = median_of([(0, h2d(0, n))])[0]
    one_mm = median_of([(2, matmuls(10))])[0] / 10
    k = max(int(copy_s * 3 / one_mm), 10)  # a loop lasting about three copies
    loop_alone = median_of([(2, matmuls(k))])[0]

    def copies() -> None:
        for _ in range(3):
            gpu[0][:n].copy_(host[0][:n], non_blocking=True)

    both = median_of([(2, matmuls(k)), (0, copies)])
    copies_alone = median_of([(0, copies)])[0]
    out["compute"] = {
        "matmul_side": m,
        "matmuls": k,
        "loop_alone_s": loop_alone,
        "loop_with_copies_s": both[0],
        "loop_slowdown": both[0] / loop_alone,
        "copies_alone_s": copies_alone,
        "copies_with_loop_s": both[1],
        "copies_slowdown": both[1] / copies_alone,
        "copy_bytes": 3 * n,
    }
    print(json.dumps(out["compute"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
