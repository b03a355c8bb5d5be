"""Simulated default vs EPD serving of a multimodal model (docs/epd.md, "Simulation").

A small step-level model, separate from the core simulator (sim/engine.py) so that its records
and golden hashes stay untouched; it reuses the core's operator-table step cost (`OpStepCost`).

- Default: one engine; a step that admits a request with an image also runs the vision encoder
  for it, so every request in that step waits for the encoder (the stall EPD removes).
- EPD: an encoder instance encodes images FCFS (up to its budget per batch) on its own device;
  each embedding is announced to PD at E's scheduling time, PD preallocates encoder-cache space
  at its next step if it fits (capacity in encoder tokens, freed when the request's prefill is
  done), data moves at `transfer_gb_s`, and the request becomes schedulable one PD iteration
  after the data arrived (the two-step preallocation's injection report).

Costs: language model from the H100 operator table (Qwen2.5-VL-3B LM rows); vision encoder
`vit_depth` x the `vit_block` row at the image's patch count. A100 is derived from H100 by
roofline spec ratios (LM rows) and by the FLOP/s ratio (ViT, compute-bound at these sizes).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from agentic_kvc.profiles import op_rows
from agentic_kvc.profiles.gpu import OpStepCost
from agentic_kvc.profiles.hardware import HardwareSpec, get_hardware
from agentic_kvc.profiles.models import get_model
from agentic_kvc.profiles.ops import Curve

MS = 1e-3
# Qwen2.5-VL-3B language model: its shape lives with the others in profiles/models.py.
QWEN25_VL_3B = get_model("qwen2.5-vl-3b")
VIT_OPS = "qwen2.5-vl-3b-vit"
VIT_DEPTH = 32  # Qwen2.5-VL vision tower blocks
# A100-SXM4-80GB spec sheet: 312 TFLOP/s dense bf16, 2.04 TB/s HBM.
A100 = HardwareSpec("a100", 312.0, 2.04, 79.2, derived_from="h100")


@dataclass(frozen=True)
class MMRequest:
    req_id: int
    text_tokens: int
    image_patches: int  # ViT patches (14x14 px); LM image tokens = patches / 4 (2x2 merge)
    output_tokens: int

    @property
    def image_tokens(self) -> int:
        return self.image_patches // 4

    @property
    def prompt_tokens(self) -> int:
        return self.text_tokens + self.image_tokens


@dataclass(frozen=True)
class EPDSimConfig:
    hardware: str = "a100"
    mode: str = "default"  # default | epd
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    encoder_budget: int = 8192  # encoder tokens per step (vLLM max_num_encoder_input_tokens)
    encoder_cache_tokens: int = 16384  # PD encoder-cache capacity (EPD)
    transfer_gb_s: float = 2.0  # E -> PD embedding transfer (Redis on one host)
    transfer_latency_s: float = 1e-3  # per message (metadata, notice, data)
    vit_overhead_s: float = 2e-3  # per encoder batch (launches, patch merger)


def _profile(hardware: str) -> tuple[OpStepCost, Curve]:
    spec = A100 if hardware == "a100" else get_hardware(hardware)
    src = get_hardware("h100")
    lm_rows = op_rows(spec, QWEN25_VL_3B) if spec is not A100 else None
    if spec is A100:
        from agentic_kvc.profiles import DATA
        from agentic_kvc.profiles.ops import derive_rows, load_ops_csv

        all_rows = load_ops_csv(DATA / "h100_ops_profile.csv")
        lm_rows = derive_rows(all_rows, QWEN25_VL_3B, src, spec)
        vit = [r for r in all_rows if r.op == "vit_block"]
    else:
        from agentic_kvc.profiles import _measured_rows

        vit = [r for r in _measured_rows(src.name) if r.op == "vit_block"]
    scale = src.flops / spec.flops
    assert lm_rows is not None
    return OpStepCost(QWEN25_VL_3B, lm_rows), Curve([(r.m, r.ms * MS * scale) for r in vit])


@dataclass
class _State:
    req: MMRequest
    computed: int = 0
    generated: int = 0
    first_t: float | None = None
    last_t: float = 0.0
    itl: list[float] = field(default_factory=list)
    eligible_t: float = math.inf  # EPD: schedulable from this time
    data_t: float = math.inf  # EPD: embedding at PD
    meta_t: float = math.inf  # EPD: announcement at PD
    prealloc: bool = False
    encoded: bool = False  # default: image encoded in-engine
    done_t: float | None = None


def simulate(requests: list[MMRequest], cfg: EPDSimConfig) -> list[dict]:
    """All requests arrive at t=0 (the benchmark's infinite request rate); per-request records."""
    cost, vit = _profile(cfg.hardware)
    vit_s = lambda patches: cfg.vit_overhead_s + VIT_DEPTH * vit(patches)  # noqa: E731
    states = [_State(r) for r in requests]
    if cfg.mode == "epd":
        _encode_side(states, cfg, vit_s)
    elif cfg.mode != "default":
        raise ValueError(f"mode must be 'default' or 'epd', got {cfg.mode!r}")
    waiting = list(states)
    running: list[_State] = []
    cache_free = cfg.encoder_cache_tokens
    t = 0.0
    while waiting or running:
        if cfg.mode == "epd":  # step one: preallocate FCFS for announced inputs that fit
            for s in waiting:
                if not s.prealloc and s.meta_t <= t and math.isinf(s.eligible_t):
                    if s.req.image_tokens > cache_free:
                        break
                    cache_free -= s.req.image_tokens
                    s.prealloc = True
                    s.data_t = max(s.data_t, t + cfg.transfer_latency_s)
        budget = cfg.max_batched_tokens
        decode = [s for s in running if s.computed >= s.req.prompt_tokens]
        budget -= len(decode)
        chunks: list[tuple[_State, int]] = []
        for s in running:
            if s.computed < s.req.prompt_tokens and budget > 0:
                n = min(budget, s.req.prompt_tokens - s.computed)
                chunks.append((s, n))
                budget -= n
        enc_s, enc_left = 0.0, cfg.encoder_budget
        for s in list(waiting):
            if budget <= 0 or len(running) >= cfg.max_num_seqs:
                break
            if cfg.mode == "epd" and s.eligible_t > t:
                continue  # waits for its injected embedding; later ones may go
            if cfg.mode == "default":
                if s.req.image_tokens > enc_left and enc_left < cfg.encoder_budget:
                    break
                enc_s += vit_s(s.req.image_patches)
                enc_left -= s.req.image_tokens
            waiting.remove(s)
            running.append(s)
            n = min(budget, s.req.prompt_tokens)
            chunks.append((s, n))
            budget -= n
        if not decode and not chunks:  # idle: jump to the next embedding arrival
            nxt = min((s.data_t for s in waiting if s.data_t > t), default=math.inf)
            nxt = min(nxt, min((s.eligible_t for s in waiting), default=math.inf))
            nxt = min(nxt, min((s.meta_t for s in waiting if not s.prealloc), default=math.inf))
            if math.isinf(nxt):
                raise RuntimeError("simulation stalled: encoder cache too small for an image?")
            t = max(nxt, t + 1e-6) if nxt > t else t + cost.step_overhead_s
            _inject(waiting, t, t)
            continue
        kv = sum(s.computed for s in decode)
        step = cost.step_s([(n, s.computed) for s, n in chunks], len(decode), kv) + enc_s
        start, t = t, t + step
        for s, n in chunks:
            s.computed += n
            if s.computed >= s.req.prompt_tokens:
                if s.prealloc:  # embedding consumed: free its encoder-cache space
                    cache_free += s.req.image_tokens
                    s.prealloc = False
                _emit(s, t)
        for s in decode:
            _emit(s, t)
        for s in [s for s in running if s.generated >= s.req.output_tokens]:
            s.done_t = t
            running.remove(s)
        _inject(waiting, start, t)
    return [_record(s, cfg) for s in states]


def _inject(waiting: list[_State], start: float, end: float) -> None:
    """Data that arrived by the end of this step is reported injected: schedulable next step."""
    for s in waiting:
        if s.prealloc and s.data_t <= end and math.isinf(s.eligible_t):
            s.eligible_t = end


def _encode_side(states: list[_State], cfg: EPDSimConfig, vit_s) -> None:  # type: ignore[no-untyped-def]
    """E encodes FCFS batches up to its budget; metadata goes out at scheduling time."""
    te, i = 0.0, 0
    while i < len(states):
        batch, left = [], cfg.encoder_budget
        while i < len(states) and (not batch or states[i].req.image_tokens <= left):
            batch.append(states[i])
            left -= states[i].req.image_tokens
            i += 1
        done = te + vit_s(sum(s.req.image_patches for s in batch))
        for s in batch:
            s.meta_t = te + cfg.transfer_latency_s
            nbytes = s.req.image_tokens * QWEN25_VL_3B.hidden * 2
            s.data_t = done + cfg.transfer_latency_s + nbytes / (cfg.transfer_gb_s * 1e9)
        te = done


def _emit(s: _State, t: float) -> None:
    if s.first_t is None:
        s.first_t = t
    else:
        s.itl.append(t - s.last_t)
    s.last_t = t
    s.generated += 1


def _record(s: _State, cfg: EPDSimConfig) -> dict:
    r = s.req
    assert s.first_t is not None and s.done_t is not None
    tpot = (s.done_t - s.first_t) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
    return {
        "req_id": r.req_id,
        "mode": cfg.mode,
        "hardware": cfg.hardware,
        "text_tokens": r.text_tokens,
        "image_tokens": r.image_tokens,
        "output_tokens": r.output_tokens,
        "ttft_s": s.first_t,
        "tpot_s": tpot,
        "e2e_s": s.done_t,
        "itl_s": s.itl,
    }


def visionarena_like(n: int, seed: int) -> list[MMRequest]:
    """A synthetic mix shaped like VisionArena-Chat as the EPD benchmark used it (docs/epd.md):
    one image per prompt, short text (the benchmark's ~80-160 text tokens per prompt), outputs
    capped at 128 with early stops (its ~107-110 generated tokens per prompt), and image sizes
    of user uploads (screenshots and photos) resized to Qwen2.5-VL's 28-px grid."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = max(4, int(rng.lognormvariate(math.log(60), 0.9)))
        # Long side ~ lognormal around 900 px, aspect ratio 4:3 / 16:9 / 1:1 / portrait.
        long_side = min(3000, max(224, rng.lognormvariate(math.log(900), 0.45)))
        aspect = rng.choice([4 / 3, 16 / 9, 1.0, 3 / 4, 9 / 16])
        w, h = (long_side, long_side / aspect) if aspect >= 1 else (long_side * aspect, long_side)
        grid_w, grid_h = max(1, round(w / 28)), max(1, round(h / 28))
        patches = 4 * grid_w * grid_h
        output = 128 if rng.random() < 0.75 else rng.randint(8, 128)
        out.append(MMRequest(i, text, patches, output))
    return out
