"""Host <-> device copy time of KV-block-shaped tensors, pinned and pageable (issue 29).

The simulator's tier links (profiles/hardware.py, TIER_LINKS) price a reload as
latency + bytes / bandwidth. This measures both on a real GPU: for a range of transfer sizes
(whole KV blocks of a model: layers x K/V x block tokens x KV heads x head dim, bf16), the
median time of one copy host->device and device->host, from pinned and from pageable host
memory, as one contiguous copy and as one copy per layer (the way a per-layer KV layout is
moved). Fits latency and bandwidth per (direction, memory, layout) by least squares over the
sizes and writes everything to JSON.

    python benchmarks/kv_link_copy.py --out results/bench/kv_link_copy.json

Needs PyTorch with CUDA (a GPU host); on a machine without one it says so and exits 2.
Defaults: Qwen3-Coder-30B-A3B's KV (48 layers, 4 KV heads x 128, 16-token blocks: 1.5 MiB a
block); 1 to 2,048 blocks (12 sizes); 5 timed copies after 2 warm-ups each. Runs in about a
minute on an H100/H200.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from gpu_bench import cuda_torch, environment


def fit_affine(sizes: list[float], times: list[float]) -> tuple[float, float]:
    """Least-squares time = latency + bytes / bandwidth; returns (latency_s, bytes_per_s)."""
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(times) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    slope = sum((x - mx) * (y - my) for x, y in zip(sizes, times, strict=True)) / sxx
    return max(my - slope * mx, 0.0), (1.0 / slope if slope > 0 else float("inf"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--max-blocks", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    found = cuda_torch("kv_link_copy")
    if found is None:
        return 2
    torch, dev = found
    per_layer_block = 2 * args.block_tokens * args.kv_heads * args.head_dim  # bf16 elements
    block_bytes = per_layer_block * args.layers * 2
    counts = []
    n = 1
    while n <= args.max_blocks:
        counts.append(n)
        n *= 2
    rows = []
    for blocks in counts:
        numel = per_layer_block * args.layers * blocks
        gpu = torch.empty(numel, dtype=torch.bfloat16, device=dev)
        for memory in ("pinned", "pageable"):
            host = torch.empty(numel, dtype=torch.bfloat16, pin_memory=memory == "pinned")
            host.fill_(1)
            layer_numel = per_layer_block * blocks
            for direction in ("h2d", "d2h"):
                for layout in ("contiguous", "per_layer"):
                    src, dst = (host, gpu) if direction == "h2d" else (gpu, host)

                    def copy(src=src, dst=dst, layout=layout, layer_numel=layer_numel) -> None:
                        if layout == "contiguous":
                            dst.copy_(src, non_blocking=True)
                        else:
                            for i in range(args.layers):
                                sl = slice(i * layer_numel, (i + 1) * layer_numel)
                                dst[sl].copy_(src[sl], non_blocking=True)

                    samples = []
                    for k in range(2 + args.repeats):
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        copy()
                        torch.cuda.synchronize()
                        if k >= 2:
                            samples.append(time.perf_counter() - t0)
                    med = statistics.median(samples)
                    rows.append(
                        {
                            "blocks": blocks,
                            "bytes": numel * 2,
                            "memory": memory,
                            "direction": direction,
                            "layout": layout,
                            "median_s": med,
                            "min_s": min(samples),
                            "max_s": max(samples),
                            "gb_per_s": numel * 2 / med / 1e9,
                        }
                    )
            del host
        del gpu
        torch.cuda.empty_cache()
    fits = []
    for memory in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            for layout in ("contiguous", "per_layer"):
                sel = [
                    r
                    for r in rows
                    if (r["memory"], r["direction"], r["layout"]) == (memory, direction, layout)
                ]
                lat, bw = fit_affine([r["bytes"] for r in sel], [r["median_s"] for r in sel])
                fits.append(
                    {
                        "memory": memory,
                        "direction": direction,
                        "layout": layout,
                        "latency_s": lat,
                        "gb_per_s": bw / 1e9,
                        "peak_gb_per_s": max(r["gb_per_s"] for r in sel),
                    }
                )
    doc = {
        "benchmark": "kv_link_copy",
        **environment(torch),
        "block_bytes": block_bytes,
        "shape": {
            "layers": args.layers,
            "kv_heads": args.kv_heads,
            "head_dim": args.head_dim,
            "block_tokens": args.block_tokens,
        },
        "repeats": args.repeats,
        "fits": fits,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for f in fits:
        print(
            f"{f['direction']} {f['memory']:8s} {f['layout']:10s} latency "
            f"{f['latency_s'] * 1e6:7.1f} us  bandwidth {f['gb_per_s']:6.1f} GB/s  "
            f"peak {f['peak_gb_per_s']:6.1f} GB/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
