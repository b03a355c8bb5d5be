"""`akvc calibrate`: measure the real CPU engine's step costs and fit the cpu-tiny profile.

One real vLLM instance (the tiny model, launched by serve/launcher.py) answers two kinds of
probe, each with random token-id prompts so no prefix is ever cached:
- prefill: one request at a time, `max_tokens` 1, at several prompt lengths. Its time to first
  token is one engine step that prefills the whole prompt (the prompt fits the token budget),
  plus the request's fixed path cost, which the fit's per-prefill-sequence term absorbs.
- decode: B requests with C-token prompts, first prefilled (and so cached) one token each, then
  sent again together generating N tokens each: they decode side by side from the first step.
  vLLM's own per-request decode-time histogram (first to last token, engine-side timestamps)
  divided by N - 1 is one decode step of batch B over about B * (C + N / 2) KV tokens. Client
  inter-token gaps are not used: on a busy CPU the API server sends tokens in bursts.
The linear model of profiles/linear.py is then fitted by non-negative least squares on relative
errors, and the coefficients, per-point residuals and machine facts are written as JSON.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agentic_kvc.portable import round_significant
from agentic_kvc.profiles.linear import FEATURES, LinearStepCost, step_features
from agentic_kvc.profiles.models import get_model
from agentic_kvc.runs import timing_conditions

OUTLIER_REL_ERROR = 0.6  # a probe this far off the first fit is treated as disturbed
# Token ids for prompts: above the tiny tokenizer's special tokens, inside its vocabulary.
TOKEN_LO, TOKEN_HI = 16, 8000


@dataclass(frozen=True)
class Measurement:
    """One probed step shape and its measured duration (median over samples)."""

    kind: str  # "prefill" | "decode"
    prefill_chunks: tuple[tuple[int, int], ...]
    decode_batch: int
    decode_kv_tokens: int
    seconds: float
    samples: int = 1

    def features(self) -> tuple[float, ...]:
        return step_features(self.prefill_chunks, self.decode_batch, self.decode_kv_tokens)


@dataclass(frozen=True)
class Plan:
    """What to probe. Defaults take under a minute after start-up on one core."""

    prefill_lengths: tuple[int, ...] = (32, 256, 512, 1024, 2048, 3072, 3968)
    prefill_reps: int = 3
    decode_batches: tuple[int, ...] = (1, 4, 16, 32)
    decode_contexts: tuple[int, ...] = (128, 1024, 2048)
    decode_tokens: int = 64
    warmup: int = 3


# `akvc calibrate --quick` and the real-engine test: fewer probes, a rougher fit.
QUICK_PLAN = Plan(
    prefill_lengths=(64, 1024, 3072),
    prefill_reps=1,
    decode_batches=(1, 8),
    decode_contexts=(256, 2048),
    decode_tokens=24,
    warmup=1,
)


@dataclass
class Fit:
    cost: LinearStepCost
    residuals: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        used = [r for r in self.residuals if not r.get("excluded")]
        rel = [abs(r["rel_error"]) for r in used]
        by_kind = {
            kind: [abs(r["rel_error"]) for r in used if r["kind"] == kind]
            for kind in ("prefill", "decode")
        }
        out = {
            "points": float(len(rel)),
            "excluded_outliers": float(len(self.residuals) - len(used)),
            "mean_abs_rel_error": statistics.fmean(rel) if rel else 0.0,
            "max_abs_rel_error": max(rel) if rel else 0.0,
        }
        for kind, vals in by_kind.items():
            if vals:
                out[f"{kind}_mean_abs_rel_error"] = statistics.fmean(vals)
        return out


def nnls_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares of x @ c ~ y on relative errors (each row divided by y).

    Active-set by elimination: solve, drop the most negative coefficient, repeat. Columns are
    scaled to unit norm first because the features span ~12 orders of magnitude.
    """
    w = x / y[:, None]
    ones = np.ones_like(y)
    scale = np.linalg.norm(w, axis=0)
    scale[scale == 0] = 1.0
    ws = w / scale
    active = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(ws[:, active], ones, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return coef / scale


def fit(measurements: Sequence[Measurement]) -> Fit:
    """Fit the linear step model; fails clearly when the probes cannot identify it."""
    if len(measurements) < len(FEATURES):
        raise ValueError(f"need at least {len(FEATURES)} measurements, got {len(measurements)}")
    kinds = {m.kind for m in measurements}
    if kinds != {"prefill", "decode"}:
        raise ValueError(f"need both prefill and decode measurements, got {sorted(kinds)}")
    for i, m in enumerate(measurements):
        if not m.seconds > 0:
            raise ValueError(f"measurement {i} ({m.kind}): seconds must be > 0, got {m.seconds}")
    x = np.array([m.features() for m in measurements], dtype=float)
    y = np.array([m.seconds for m in measurements], dtype=float)
    keep = np.ones(len(y), dtype=bool)
    coef = nnls_relative(x, y)
    # One refit without gross outliers: a probe that another process stalled (a shared core)
    # reads several times its neighbours and would drag every coefficient.
    rel = np.abs(x @ coef - y) / y
    outliers = rel > OUTLIER_REL_ERROR
    if outliers.any() and len(y) - outliers.sum() >= len(FEATURES):
        keep = ~outliers
        coef = nnls_relative(x[keep], y[keep])
    # Rounded where made: the solver's last bits depend on the BLAS kernel (agentic_kvc.portable).
    cost = LinearStepCost(
        **{name: round_significant(float(c)) for name, c in zip(FEATURES, coef, strict=True)}
    )
    residuals = []
    for m, kept in zip(measurements, keep, strict=True):
        pred = cost.step_s(m.prefill_chunks, m.decode_batch, m.decode_kv_tokens)
        residuals.append(
            {
                "kind": m.kind,
                "prefill_chunks": [list(c) for c in m.prefill_chunks],
                "decode_batch": m.decode_batch,
                "decode_kv_tokens": m.decode_kv_tokens,
                "measured_s": m.seconds,
                "predicted_s": pred,
                "rel_error": (pred - m.seconds) / m.seconds,
                "samples": m.samples,
                "excluded": not bool(kept),
            }
        )
    return Fit(cost, residuals)


# --- probing a live server -------------------------------------------------------------------


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]


async def _stream(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], max_tokens: int
) -> list[float]:
    """Monotonic arrival time of every streamed token (SSE event with choices)."""
    from agentic_kvc.replay.client import completion_body
    from agentic_kvc.replay.sse import StreamTiming

    body = completion_body(model, prompt, max_tokens, session_id=None)
    loop = asyncio.get_running_loop()
    timing = StreamTiming(t_send=loop.time())
    stamps: list[float] = []
    async with client.stream("POST", url + "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise RuntimeError(f"{url}: HTTP {resp.status_code}: {text[:300]}")
        async for line in resp.aiter_lines():
            before = timing.content_events
            timing.feed_line(line.encode(), loop.time())
            if timing.error:
                raise RuntimeError(f"{url}: {timing.error}")
            if timing.content_events > before:
                stamps.append(loop.time())
    return [timing.t_send, *stamps]


async def probe(
    url: str,
    model: str,
    plan: Plan,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[Measurement]:
    """Run the plan's probes against a live server; see the module doc."""
    rng = random.Random(seed)
    out: list[Measurement] = []
    async with httpx.AsyncClient(timeout=600.0) as client:
        for _ in range(plan.warmup):
            await _stream(client, url, model, _prompt(rng, 512), 8)
        for length in plan.prefill_lengths:
            ttfts = []
            for _ in range(plan.prefill_reps):
                stamps = await _stream(client, url, model, _prompt(rng, length), 1)
                ttfts.append(stamps[1] - stamps[0])
            out.append(
                Measurement("prefill", ((length, 0),), 0, 0, statistics.median(ttfts), len(ttfts))
            )
            progress(f"prefill {length:5d} tokens: {out[-1].seconds * 1e3:8.2f} ms")
        for ctx in plan.decode_contexts:
            for batch in plan.decode_batches:
                prompts = [_prompt(rng, ctx) for _ in range(batch)]
                # Prefill (and cache) the prompts first, so the timed batch starts decoding at
                # once instead of mixing its prefills into the first decode steps.
                await asyncio.gather(*(_stream(client, url, model, p, 1) for p in prompts))
                before = await decode_time_totals(client, url)
                await asyncio.gather(
                    *(_stream(client, url, model, p, plan.decode_tokens) for p in prompts)
                )
                after = await decode_time_totals(client, url)
                n = after[1] - before[1]
                if n != batch:
                    raise RuntimeError(
                        f"{url}: decode probe batch={batch} ctx={ctx}: the engine counted {n} "
                        "requests' decode times"
                    )
                step = (after[0] - before[0]) / n / (plan.decode_tokens - 1)
                kv = batch * (ctx + plan.decode_tokens // 2)
                out.append(Measurement("decode", (), batch, kv, step, batch))
                progress(f"decode batch {batch:3d} ctx {ctx:5d}: {step * 1e3:8.2f} ms/step")
    return out


DECODE_TIME = "vllm:request_decode_time_seconds"


async def decode_time_totals(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """(sum, count) of vLLM's per-request decode-time histogram: first to last token, stamped
    by the engine core, so the API server's batching of streamed events does not blur it."""
    text = (await client.get(url + "/metrics")).text
    total, count = 0.0, 0.0
    for line in text.splitlines():
        if line.startswith(DECODE_TIME + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(DECODE_TIME + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    if not count and DECODE_TIME not in text:
        raise RuntimeError(f"{url}/metrics: no {DECODE_TIME} histogram")
    return total, count


def measurements_from_doc(doc: dict[str, Any], where: str) -> list[Measurement]:
    """The probes stored in a profile file's residuals (to refit without an engine)."""
    try:
        return [
            Measurement(
                r["kind"],
                tuple((int(c), int(x)) for c, x in r["prefill_chunks"]),
                int(r["decode_batch"]),
                int(r["decode_kv_tokens"]),
                float(r["measured_s"]),
                int(r.get("samples", 1)),
            )
            for r in doc["residuals"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: field 'residuals': {exc!r}") from None


def refit(path: Path) -> dict[str, Any]:
    """Refit a profile file's coefficients from its stored probes (after a model change)."""
    import json

    from agentic_kvc.io import atomic_write_json

    doc = json.loads(path.read_text())
    result = fit(measurements_from_doc(doc, str(path)))
    doc.update(coefficients=result.cost.as_dict(), fit=result.summary(), residuals=result.residuals)
    # A serving fit scales the coefficients it was fitted on; it does not carry over.
    doc.pop("serving_fit", None)
    atomic_write_json(path, doc)
    return doc


def calibrate(
    out: Path,
    log_dir: Path,
    plan: Plan = Plan(),
    block_size: int = 32,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Launch one real tiny-model instance, probe it, fit, write the profile JSON to `out`."""
    from agentic_kvc.config import FleetConfig
    from agentic_kvc.io import atomic_write_json
    from agentic_kvc.metrics.prometheus import parse_vllm_metrics
    from agentic_kvc.serve.device import pinned
    from agentic_kvc.serve.launcher import VllmFleet

    fleet_cfg = FleetConfig(instances=1, model="tiny", hardware="cpu-tiny", block_size=block_size)
    started = dt.datetime.now(dt.UTC)
    with VllmFleet.from_config(fleet_cfg, log_dir) as fleet:
        url = fleet.urls[0]
        desc = fleet.describe()
        progress(f"vLLM up at {url} after {desc['instances'][0]['startup_s']} s")
        with pinned(fleet.plan.frontend_cores):  # the client off the worker's core
            measurements = asyncio.run(probe(url, fleet.model_name, plan, seed, progress))
        metrics = parse_vllm_metrics(httpx.get(url + "/metrics", timeout=10).text)
    if not metrics.num_gpu_blocks or not metrics.block_size:
        raise RuntimeError(f"{url}/metrics: no cache_config_info; cannot size the KV cache")
    result = fit(measurements)
    shape = get_model("tiny")
    vllm = desc.get("vllm") or {}
    doc = {
        "hardware": "cpu-tiny",
        "model": "tiny",
        "form": "step = " + " + ".join(FEATURES) + " (profiles/linear.py)",
        "coefficients": result.cost.as_dict(),
        "fit": result.summary(),
        "residuals": result.residuals,
        "kv_bytes_per_token": shape.kv_bytes_per_token,
        "kv_capacity_tokens": metrics.num_gpu_blocks * metrics.block_size,
        "engine": {
            "block_size": metrics.block_size,
            "num_gpu_blocks": metrics.num_gpu_blocks,
            "argv": desc["instances"][0]["argv"][3:],
            "env": desc["instances"][0]["env"],
        },
        "plan": asdict(plan),
        "seed": seed,
        "vllm_version": vllm.get("version"),
        "vllm_distribution": vllm.get("distribution"),
        "machine": timing_conditions(),
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
        "command": " ".join(["akvc", "calibrate", *sys.argv[1:]])
        if Path(sys.argv[0]).name == "akvc"
        else " ".join(sys.argv),
    }
    atomic_write_json(out, doc)
    return doc


def run_serving(
    results: Path, host_cores: int, log: Callable[[str], None], repeats: int = 1
) -> list[Path]:
    """The serving stage's real replays (`calibrate/serving_fit.py` fits them): the calibration
    workload on 1 real instance and on `host_cores` (none spare), `repeats` times each,
    interleaved (1, n, 1, n, ...) so that a change in the machine's load hits both sizes."""
    from agentic_kvc.calibrate.serving_fit import serving_config, serving_sizes
    from agentic_kvc.runs import execute

    return [
        execute(serving_config(n, repeat=k), results, log=log)
        for k in range(repeats)
        for n in serving_sizes(host_cores)
    ]
