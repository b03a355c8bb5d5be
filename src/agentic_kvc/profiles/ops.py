"""Measured operator costs (one layer's op at a token count / context) and their interpolation.

A table comes from a CSV measured on one GPU (data/h100_ops_profile.csv, columns
`op, model, m, ctx, n_bytes, ms, reps`). Another GPU's table is derived from it row by row with
a roofline: each row's FLOPs and bytes follow from the model's shape, and its time scales by
max(FLOPs / F_dst, bytes / B_dst) / max(FLOPs / F_src, bytes / B_src). So an op with arithmetic
intensity above both ridges scales by FLOP/s, one below both by bandwidth, and one between them
(compute-bound on a low-FLOP GPU like the H20, memory-bound on the H100) by the mix its roofline
gives.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.profiles.hardware import HardwareSpec
from agentic_kvc.profiles.models import ModelShape

COLUMNS = ("op", "model", "m", "ctx", "n_bytes", "ms", "reps")


@dataclass(frozen=True)
class OpRow:
    op: str
    model: str
    m: int
    ctx: int
    n_bytes: int
    ms: float


def load_ops_csv(path: Path) -> list[OpRow]:
    """Rows of an operator table; a malformed line fails naming file, line and field."""
    rows: list[OpRow] = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: header lacks columns {sorted(missing)}")
        for line, rec in enumerate(reader, start=2):
            field = "op"
            try:
                values: dict[str, int | float] = {}
                for field in ("m", "ctx", "n_bytes"):
                    values[field] = int(rec[field])
                field = "ms"
                ms = float(rec["ms"])
                if not ms > 0:
                    raise ValueError("must be > 0")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{line}: field {field!r}: {exc}") from None
            rows.append(
                OpRow(
                    rec["op"],
                    rec["model"],
                    int(values["m"]),
                    int(values["ctx"]),
                    int(values["n_bytes"]),
                    ms,
                )
            )
    return rows


def op_flops_bytes(row: OpRow, shape: ModelShape) -> tuple[float, float]:
    """FLOPs and HBM bytes of one measured op (bf16), from the model's shape."""
    b, m, ctx = shape.dtype_bytes, row.m, row.ctx
    q_dim = shape.q_heads * shape.head_dim
    linears = {**shape.linear_shapes(), "lm_head": (shape.hidden, shape.vocab)}
    if row.op in linears:
        k, n = linears[row.op]
        return 2.0 * m * k * n, b * (k * n + m * k + m * n)
    if row.op == "moe_ffn_grouped":
        expert_bytes = 3 * shape.hidden * shape.ffn * b
        touched = shape.experts * (1 - (1 - shape.top_k / shape.experts) ** m)
        flops = 2.0 * m * shape.top_k * 3 * shape.hidden * shape.ffn
        return flops, touched * expert_bytes + 2 * m * shape.hidden * b * (1 + shape.top_k)
    if row.op == "attn_prefill":
        flops = 4.0 * q_dim * m * (ctx + m / 2)
        return flops, (ctx + m) * shape.kv_bytes_per_token_layer + 2 * m * q_dim * b
    if row.op == "attn_decode":
        kv = row.n_bytes or m * ctx * shape.kv_bytes_per_token_layer
        return 4.0 * q_dim * m * ctx, kv + 2 * m * q_dim * b
    raise ValueError(f"no FLOP/byte model for op {row.op!r}")


def derive_rows(
    rows: Sequence[OpRow], shape: ModelShape, src: HardwareSpec, dst: HardwareSpec
) -> list[OpRow]:
    """`shape`'s rows as they would measure on `dst`, scaled by roofline times (module doc)."""
    out = []
    for row in rows:
        if row.model != shape.ops_name:
            continue
        flops, nbytes = op_flops_bytes(row, shape)
        ratio = max(flops / dst.flops, nbytes / dst.bytes_per_s) / max(
            flops / src.flops, nbytes / src.bytes_per_s
        )
        out.append(OpRow(row.op, row.model, row.m, row.ctx, row.n_bytes, row.ms * ratio))
    return out


class Curve:
    """Piecewise-linear y(x) through measured points: flat below the first point (a launch floor),
    extended along the last segment above the last point."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        if not points:
            raise ValueError("a curve needs at least one point")
        pts = sorted(points)
        self.xs = [float(x) for x, _ in pts]
        self.ys = [float(y) for _, y in pts]

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0] or len(xs) == 1:
            return ys[0]
        i = min(bisect.bisect_right(xs, x), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def fit_affine(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x, both clamped at >= 0 (costs cannot be negative)."""
    n = len(points)
    if n == 1:
        return max(points[0][1], 0.0), 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0
    b = max(b, 0.0)
    return max(my - b * mx, 0.0), b
