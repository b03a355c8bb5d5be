"""Bootstrap intervals for the instruments' findings (fixed seed: same rows, same interval)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from agentic_kvc.paired import BOOT_SEED, CONFIDENCE, N_BOOT


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95% percentile-bootstrap interval over the values (i.i.d. resampling)."""
    arr = np.asarray(values, dtype=float)
    if not len(arr):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(BOOT_SEED)
    boots = arr[rng.integers(0, len(arr), size=(N_BOOT, len(arr)))].mean(axis=1)
    lo, hi = np.percentile(boots, [50 * (1 - CONFIDENCE), 100 - 50 * (1 - CONFIDENCE)])
    return float(arr.mean()), float(lo), float(hi)


def paired_quantile_rel(
    base: Mapping[str, float], cand: Mapping[str, float], q: float = 0.9
) -> tuple[float, float, float, int]:
    """cand / base - 1 of the q-quantile over the ids both have, with a 95% bootstrap
    interval that draws the same ids for both sides (the pairing)."""
    ids = sorted(set(base) & set(cand))
    if not ids:
        return float("nan"), float("nan"), float("nan"), 0
    b = np.array([base[i] for i in ids])
    c = np.array([cand[i] for i in ids])
    point = float(np.quantile(c, q) / np.quantile(b, q) - 1)
    rng = np.random.default_rng(BOOT_SEED)
    idx = rng.integers(0, len(ids), size=(N_BOOT, len(ids)))
    boots = np.quantile(c[idx], q, axis=1) / np.quantile(b[idx], q, axis=1) - 1
    lo, hi = np.percentile(boots, [50 * (1 - CONFIDENCE), 100 - 50 * (1 - CONFIDENCE)])
    return point, float(lo), float(hi), len(ids)
