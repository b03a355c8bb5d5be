"""Paired comparisons of two variants with a two-level (seeds, then requests) bootstrap.

Runs of two variants that share a workload seed replayed the same sessions, so they are pairs;
in a closed-loop replay they even issue the same requests (same `request_id`). A difference
between two variants is therefore estimated on paired data:

- a variant's value is the statistic over its runs with seeds pooled (the p90 of TTFT over
  every request of every seed, the hit rate over all their tokens), as in the variant tables;
- the paired relative difference is candidate / baseline - 1;
- its 95% interval is a percentile bootstrap that resamples at both levels the data vary at:
  first the pairs (seeds, with replacement), then, within each drawn pair, the request ids
  (with replacement), the same ids for both variants. Resampling seeds carries the
  workload-to-workload spread (one seed's sessions can be much heavier than another's);
  resampling requests carries the spread within a run; drawing the same ids on both sides keeps
  the pairing, so a seed that is slow for both variants does not widen the interval of their
  difference. `scipy.stats.bootstrap` resamples i.i.d. observations (its `paired` option pairs
  observations, not clusters of them), so the two levels are drawn here with numpy.

A difference whose interval contains 0 is "n.s." (not significant). With few seeds the seed
level is coarse (5 seeds give few distinct resamples), which is why studies use at least 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

CONFIDENCE = 0.95
N_BOOT = 1000
BOOT_SEED = 20261124  # fixed: the same records always give the same interval

# metric name -> (record column, quantile or None); None means a tokens ratio (see _stat).
QUANTILE_METRICS: dict[str, tuple[str, float]] = {
    f"{lat}_p{p}": (f"{lat}_s", p / 100) for lat in ("ttft", "tpot", "e2e") for p in (50, 90, 99)
}
RATIO_METRICS = ("hit_rate", "token_max_over_min")
METRICS = (*QUANTILE_METRICS, *RATIO_METRICS)


@dataclass(slots=True, frozen=True)
class PairedResult:
    metric: str
    baseline: str
    candidate: str
    baseline_value: float
    candidate_value: float
    rel_diff: float  # candidate / baseline - 1
    ci_low: float
    ci_high: float
    n_pairs: int  # seeds (or other pair keys) both variants have
    n_requests: int  # request ids over those pairs
    # Requests whose metric input or prefill placement differs between the two sides; 0 means
    # the two variants behaved identically (the mechanism that tells them apart never acted);
    # -1: not counted.
    n_differ: int = -1

    @property
    def significant(self) -> bool:
        """The interval excludes 0, over at least two pairs: with one pair the bootstrap can
        only resample that run's requests, which says nothing of another seed or window. An
        undefined interval (NaN: a ratio with an idle instance, say) excludes nothing."""
        if self.n_pairs < 2 or self.identical:
            return False
        lo, hi = self.ci_low, self.ci_high
        return bool(np.isfinite(lo) and np.isfinite(hi)) and not (lo <= 0.0 <= hi)

    @property
    def identical(self) -> bool:
        """Both sides gave the same value for every paired request, placed alike: not "no
        significant difference" but no difference at all, which the report words apart."""
        return self.n_differ == 0

    @property
    def verdict(self) -> str:
        """ "higher" / "lower" (candidate against baseline), "n.s." when 0 is inside,
        "identical" when no request differs."""
        if self.identical:
            return "identical"
        if not self.significant:
            return "n.s."
        return "higher" if self.rel_diff > 0 else "lower"

    def to_row(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant, "verdict": self.verdict}


@dataclass(slots=True)
class _Pair:
    """One pair's aligned arrays: row i of every array is the same request id."""

    base: dict[str, np.ndarray]
    cand: dict[str, np.ndarray]


_COLUMNS = ("ttft_s", "tpot_s", "e2e_s", "input_tokens", "cached_tokens", "prefill_instance")

# The request-record fields a paired comparison reads, typed: the request id that pairs rows,
# `_COLUMNS`, and the error that drops a request's latencies. A requests frame for
# `paired_compare` holds these plus the labels that select and pair runs.
REQUEST_SCHEMA: dict[str, type[pl.DataType]] = {
    "request_id": pl.String,
    "ttft_s": pl.Float64,
    "tpot_s": pl.Float64,
    "e2e_s": pl.Float64,
    "input_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "prefill_instance": pl.Int64,
    "error": pl.String,
}


def request_frame(records: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """The records' `REQUEST_SCHEMA` fields, typed (a field a record lacks is null)."""
    rows = [{c: r.get(c) for c in REQUEST_SCHEMA} for r in records]
    return pl.DataFrame(rows, schema=REQUEST_SCHEMA)


def _ok_values(df: pl.DataFrame) -> pl.DataFrame:
    """Errors become missing latencies: percentiles are over error-free requests."""
    ok = pl.col("error").is_null() | (pl.col("error") == "")
    lat = [
        pl.when(ok).then(pl.col(c)).otherwise(None).alias(c) for c in ("ttft_s", "tpot_s", "e2e_s")
    ]
    toks = [
        pl.when(ok).then(pl.col(c).fill_null(0)).otherwise(0).alias(c)
        for c in ("input_tokens", "cached_tokens")
    ]
    inst = pl.when(ok).then(pl.col("prefill_instance")).otherwise(-1).fill_null(-1)
    return df.with_columns(*lat, *toks, inst.alias("prefill_instance"))


def _arrays(df: pl.DataFrame, suffix: str) -> dict[str, np.ndarray]:
    out = {}
    for c in _COLUMNS:
        s = df.get_column(f"{c}{suffix}")
        out[c] = s.cast(pl.Float64).fill_null(np.nan).to_numpy()
    return out


def _pairs(
    requests: pl.DataFrame, baseline: str, candidate: str, by: str, pair_on: Sequence[str]
) -> tuple[list[_Pair], list[int]]:
    """Aligned arrays per pair key present for both variants (and each pair's instance count)."""
    df = _ok_values(requests.filter(pl.col(by).is_in([baseline, candidate])))
    keys_b = df.filter(pl.col(by) == baseline).select(pair_on).unique()
    keys_c = df.filter(pl.col(by) == candidate).select(pair_on).unique()
    keys = keys_b.join(keys_c, on=list(pair_on), how="inner").sort(list(pair_on))
    pairs, instances = [], []
    for key in keys.iter_rows(named=True):
        sel = df
        for k, v in key.items():
            sel = sel.filter(pl.col(k) == v)
        cols = ["request_id", *_COLUMNS]
        b = sel.filter(pl.col(by) == baseline).select(cols)
        c = sel.filter(pl.col(by) == candidate).select(cols)
        # Full join on request id: a request one side lacks is missing (NaN) there.
        j = b.join(c, on="request_id", how="full", coalesce=True, suffix="_c").sort("request_id")
        pairs.append(_Pair(_arrays(j, ""), _arrays(j, "_c")))
        instances.append(int(sel.get_column("instances").max() or 1))
    return pairs, instances


def _quantile(values: np.ndarray, q: float) -> float:
    """np.quantile(values without NaN, q), method "linear", to the last bit, ~10x faster.

    The bootstrap asks for ~10^5 quantiles per report; np.quantile's generality costs ~0.15 ms
    a call. This is its arithmetic on the two order statistics around (n - 1) q, including its
    lerp, which interpolates from the upper neighbour when the weight is >= 0.5.
    """
    v = values[~np.isnan(values)]
    n = v.size
    if n == 0:
        return float("nan")
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return float(v.max())
    lo = math.floor(virtual)
    part = np.partition(v, (lo, lo + 1))
    a, b = float(part[lo]), float(part[lo + 1])
    t = virtual - lo
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _hit_rate(a: dict[str, np.ndarray]) -> float:
    total = np.nansum(a["input_tokens"])
    return float(np.nansum(a["cached_tokens"]) / total) if total > 0 else float("nan")


def _max_over_min(a: dict[str, np.ndarray], instances: int) -> float:
    inst = a["prefill_instance"]
    keep = ~np.isnan(inst) & (inst >= 0)
    work = np.nan_to_num(a["input_tokens"][keep] - a["cached_tokens"][keep])
    load = np.bincount(inst[keep].astype(np.int64), weights=work, minlength=instances)
    lo = load.min() if load.size else 0.0
    return float(load.max() / lo) if lo > 0 else float("nan")


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _stat(metric: str) -> Callable[[list[dict[str, np.ndarray]], list[int]], float]:
    """The metric of one variant over a list of pairs' arrays (seeds pooled)."""
    if metric in QUANTILE_METRICS:
        col, q = QUANTILE_METRICS[metric]
        return lambda parts, _: _quantile(np.concatenate([p[col] for p in parts]), q)
    if metric == "hit_rate":
        return lambda parts, _: _hit_rate(
            {k: np.concatenate([p[k] for p in parts]) for k in ("input_tokens", "cached_tokens")}
        )
    if metric == "token_max_over_min":
        # Imbalance is a property of one run: the mean over seeds of each run's max/min.
        return lambda parts, inst: _finite_mean(
            [_max_over_min(p, n) for p, n in zip(parts, inst, strict=True)]
        )
    raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")


def _needs(metric: str) -> tuple[str, ...]:
    """The columns a metric reads (only those are resampled)."""
    if metric in QUANTILE_METRICS:
        return (QUANTILE_METRICS[metric][0],)
    if metric == "hit_rate":
        return ("input_tokens", "cached_tokens")
    return ("input_tokens", "cached_tokens", "prefill_instance")


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise equality where two NaNs (a request missing or failed on both) are equal."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


def count_differ(pairs: Sequence[_Pair], cols: Sequence[str]) -> int:
    """Requests (over all pairs) whose value in any of `cols` or prefill instance differs."""
    n = 0
    for p in pairs:
        same = np.ones(len(p.base["ttft_s"]), dtype=bool)
        for c in (*cols, "prefill_instance"):
            same &= _same(p.base[c], p.cand[c])
        n += int((~same).sum())
    return n


def _take(
    a: dict[str, np.ndarray], idx: np.ndarray, cols: tuple[str, ...]
) -> dict[str, np.ndarray]:
    return {k: a[k][idx] for k in cols}


def paired_compare(
    requests: pl.DataFrame,
    baseline: str,
    candidate: str,
    metric: str = "ttft_p90",
    *,
    by: str = "variant",
    pair_on: Sequence[str] = ("seed",),
    n_boot: int = N_BOOT,
    confidence: float = CONFIDENCE,
    rng_seed: int = BOOT_SEED,
) -> PairedResult:
    """Compare `candidate` with `baseline` (values of column `by`) on `metric`.

    `requests` is a requests frame (`analysis.load.requests_frame`) already restricted to the
    runs being compared (one study, one workload, one load); `pair_on` names the columns whose
    equal values make two runs a pair (the workload seed; add e.g. a repeat column for real
    runs). ValueError if the two variants share no pair.
    """
    stat = _stat(metric)
    pairs, inst = _pairs(requests, baseline, candidate, by, pair_on)
    if not pairs:
        raise ValueError(
            f"{candidate!r} vs {baseline!r}: no {'/'.join(pair_on)} value has runs of both"
        )
    base_v = stat([p.base for p in pairs], inst)
    cand_v = stat([p.cand for p in pairs], inst)
    rng = np.random.default_rng(rng_seed)
    reps = np.empty(n_boot)
    sizes = [len(p.base["ttft_s"]) for p in pairs]
    cols = _needs(metric)
    for b in range(n_boot):
        drawn = rng.integers(0, len(pairs), len(pairs))
        bparts, cparts, binst = [], [], []
        for i in drawn:
            idx = rng.integers(0, sizes[i], sizes[i])
            bparts.append(_take(pairs[i].base, idx, cols))
            cparts.append(_take(pairs[i].cand, idx, cols))
            binst.append(inst[i])
        reps[b] = stat(cparts, binst) / stat(bparts, binst) - 1
    reps = reps[np.isfinite(reps)]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha]) if reps.size else (np.nan, np.nan)
    return PairedResult(
        metric=metric,
        baseline=baseline,
        candidate=candidate,
        baseline_value=base_v,
        candidate_value=cand_v,
        rel_diff=cand_v / base_v - 1 if base_v else float("nan"),
        ci_low=float(lo),
        ci_high=float(hi),
        n_pairs=len(pairs),
        n_requests=sum(sizes),
        n_differ=count_differ(pairs, cols),
    )


def paired_table(
    requests: pl.DataFrame,
    baseline: str,
    candidates: Sequence[str],
    metrics: Sequence[str] = ("ttft_p50", "ttft_p90", "e2e_p90"),
    **kwargs: Any,
) -> pl.DataFrame:
    """`paired_compare` of every candidate against `baseline` on every metric, one row each."""
    rows = [
        paired_compare(requests, baseline, c, m, **kwargs).to_row()
        for c in candidates
        if c != baseline
        for m in metrics
    ]
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def signed(x: float, digits: int = 1, extra: int = 3) -> str:
    """`x` with its sign and `digits` decimals, never a signed zero: a non-zero value that
    rounds to zero gets up to `extra` more decimals (-0.002 at 0 decimals: "-0.002", not
    "-0", which would read as an interval touching 0); an exact zero prints unsigned ("0")."""
    if x == 0:
        return f"{0:.{digits}f}"
    for d in range(digits, digits + extra + 1):
        text = f"{x:+.{d}f}"
        if float(text) != 0:
            return text
    return f"{0:.{digits}f}"


def fmt_interval_pct(lo: float, hi: float, digits: int = 1) -> str:
    """`[-18.0, -6.1]` from relative bounds, no bound printed as a signed zero."""
    return f"[{signed(lo * 100, digits)}, {signed(hi * 100, digits)}]"


def identical_text(r: PairedResult | dict[str, Any]) -> str:
    """The words for two variants that behaved identically, with the count that shows it."""
    d = r if isinstance(r, dict) else r.to_row()
    return (
        "identical: the mechanism never acted "
        f"({d['n_differ']} of {d['n_requests']} paired requests placed or timed differently)"
    )


def unmoved_text(r: PairedResult | dict[str, Any]) -> str | None:
    """For a difference whose every resample is exactly 0 while some requests differ (the
    mechanism acted on requests the statistic does not reach): words with the count, instead
    of an interval "[0.0, 0.0]" that reads as a measured null. None otherwise."""
    d = r if isinstance(r, dict) else r.to_row()
    if d.get("n_differ", -1) > 0 and d["rel_diff"] == 0 and d["ci_low"] == 0 == d["ci_high"]:
        return (
            f"unchanged: {d['n_differ']} of {d['n_requests']} paired requests differ, none "
            f"moves the {d['metric'].rsplit('_', 1)[-1]}"
        )
    return None


def fmt_diff(r: PairedResult | dict[str, Any]) -> str:
    """`-12.3% [-18.0, -6.1]` (percent, 95% interval), with ` n.s.` when 0 is inside,
    "identical: ..." when no paired request differs (not a difference of 0 with an interval),
    or "(one replicate: no interval)" when there is one pair."""
    d = r if isinstance(r, dict) else r.to_row()
    if d.get("n_differ") == 0:
        return identical_text(d)
    unmoved = unmoved_text(d)
    if unmoved is not None:
        return unmoved
    if not np.isfinite(d["rel_diff"]):
        return "-"
    if d.get("n_pairs") == 1:
        return f"{signed(d['rel_diff'] * 100)}% (one replicate: no interval)"
    text = f"{signed(d['rel_diff'] * 100)}% {fmt_interval_pct(d['ci_low'], d['ci_high'])}"
    return text if d["significant"] else f"{text} n.s."
