"""Engine profiles: composed GPU step costs, ratio-derived GPUs, KV sizing, the CPU profile file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentic_kvc.profiles import (
    DATA,
    GIB,
    RESERVED_BYTES,
    get_profile,
    kv_capacity_tokens,
    load_cpu_profile,
)
from agentic_kvc.profiles.hardware import get_hardware
from agentic_kvc.profiles.models import get_model
from agentic_kvc.profiles.ops import Curve, OpRow, derive_rows, fit_affine, load_ops_csv

GPU_PAIRS = [(h, m) for h in ("h100", "h20") for m in ("qwen3-coder-30b-a3b", "llama-3.1-8b")]


@pytest.mark.parametrize(("hardware", "model"), GPU_PAIRS)
def test_decode_affine_is_exact_for_decode_only_steps(hardware: str, model: str) -> None:
    cost = get_profile(hardware, model).cost
    for batch in (1, 3, 8, 17, 64, 200, 256, 400):
        a, b = cost.decode_affine(batch)
        for kv in (batch * 10, batch * 1000, batch * 30_000):
            assert cost.step_s([], batch, kv) == pytest.approx(a + b * kv, rel=1e-12)
    assert cost.decode_affine(0)[1] == 0.0


@pytest.mark.parametrize(("hardware", "model"), GPU_PAIRS)
def test_step_cost_grows_with_work(hardware: str, model: str) -> None:
    cost = get_profile(hardware, model).cost
    chunks = [128, 256, 700, 2048, 4096, 8192, 12000]
    times = [cost.step_s([(c, 0)], 0, 0) for c in chunks]
    assert times == sorted(times) and times[-1] > 3 * times[1]
    ctx_times = [cost.step_s([(1024, ctx)], 0, 0) for ctx in (0, 4096, 50_000, 200_000)]
    assert ctx_times == sorted(ctx_times) and ctx_times[-1] > 2 * ctx_times[0]
    decode = cost.step_s([], 32, 32 * 4000)
    mixed = cost.step_s([(512, 1000)], 32, 32 * 4000)
    assert mixed > decode
    # A mixed step is cheaper than running its parts as two steps (shared weights, overhead).
    assert mixed < decode + cost.step_s([(512, 1000)], 0, 0)


def test_h100_prefill_matches_the_operator_sum() -> None:
    """An 8k-token prefill at context 0 is layers x (linears + MoE + attention) + LM head."""
    rows = load_ops_csv(DATA / "h100_ops_profile.csv")
    ms = {(r.op, r.m, r.ctx): r.ms for r in rows if r.model == "qwen3-30b-a3b"}
    per_layer = (
        sum(ms[(op, 8192, 0)] for op in ("qkv_proj", "o_proj", "router", "moe_ffn_grouped"))
        + ms[("attn_prefill", 8192, 0)]
    )
    expected = 48 * per_layer * 1e-3 + ms[("lm_head", 1, 0)] * 1e-3
    cost = get_profile("h100", "qwen3-coder-30b-a3b").cost
    overhead = cost.step_overhead_s + cost.per_seq_overhead_s
    assert cost.step_s([(8192, 0)], 0, 0) == pytest.approx(expected + overhead, rel=1e-9)


def test_h20_scales_compute_bound_by_flops_and_memory_bound_by_bandwidth() -> None:
    shape = get_model("llama-3.1-8b")
    h100, h20 = get_hardware("h100"), get_hardware("h20")
    big_gemm = OpRow("gate_up_proj", shape.ops_name, 16384, 0, 0, 1.0)
    kv_read = OpRow("attn_decode", shape.ops_name, 64, 65536, 64 * 65536 * 4096, 1.0)
    g, d = derive_rows([big_gemm, kv_read], shape, h100, h20)
    assert g.ms == pytest.approx(989 / 148, rel=1e-6)
    assert d.ms == pytest.approx(3.35 / 4.0, rel=1e-2)
    # Intensity between the two ridges (~37 and ~295 FLOP/B): memory-bound on H100, compute
    # on H20, so the factor lies strictly between the two pure ratios.
    mid = OpRow("qkv_proj", shape.ops_name, 128, 0, 0, 1.0)
    (m,) = derive_rows([mid], shape, h100, h20)
    assert 3.35 / 4.0 < m.ms < 989 / 148
    # Other models' rows are not derived for this one.
    assert derive_rows([OpRow("qkv_proj", "other", 1, 0, 0, 1.0)], shape, h100, h20) == []


def test_h20_prefill_slower_and_decode_faster_than_h100() -> None:
    h100 = get_profile("h100", "qwen3-coder-30b-a3b").cost
    h20 = get_profile("h20", "qwen3-coder-30b-a3b").cost
    assert h20.step_s([(8192, 0)], 0, 0) > 4 * h100.step_s([(8192, 0)], 0, 0)
    assert h20.step_s([], 64, 64 * 16384) < h100.step_s([], 64, 64 * 16384)


def test_kv_sizes_from_shapes() -> None:
    qwen, llama = get_model("qwen3-coder-30b-a3b"), get_model("llama-3.1-8b")
    assert qwen.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2
    assert llama.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2
    assert qwen.params / 1e9 == pytest.approx(30.5, abs=0.2)
    assert llama.params / 1e9 == pytest.approx(8.03, abs=0.05)
    h20 = get_hardware("h20")
    free = h20.memory_gib * GIB * 0.9 - qwen.weight_bytes - RESERVED_BYTES
    assert kv_capacity_tokens(h20, qwen, 0.9) == math.floor(free / qwen.kv_bytes_per_token)
    prof = get_profile("h20", "qwen3-coder-30b-a3b", 0.9)
    assert prof.kv_capacity_tokens == kv_capacity_tokens(h20, qwen, 0.9)
    assert get_profile("h20", "qwen3-coder-30b-a3b", 0.8).kv_capacity_tokens < (
        prof.kv_capacity_tokens
    )
    with pytest.raises(ValueError, match="does not fit"):
        get_profile("h100", "qwen3-coder-30b-a3b", 0.5)


def test_unknown_names_fail_clearly() -> None:
    with pytest.raises(ValueError, match="unknown GPU"):
        get_profile("a100", "llama-3.1-8b")
    with pytest.raises(ValueError, match="unknown model"):
        get_profile("h100", "gpt-5")
    with pytest.raises(ValueError, match="only on hardware"):
        get_profile("h100", "tiny")
    with pytest.raises(ValueError, match="calibrated only"):
        get_profile("cpu-tiny", "llama-3.1-8b")


def test_cpu_tiny_profile_is_the_calibrated_file() -> None:
    prof = get_profile("cpu-tiny", "tiny")
    assert prof.source.startswith("calibrated against vLLM")
    assert prof.kv_bytes_per_token == get_model("tiny").kv_bytes_per_token == 1024
    a, b = prof.cost.decode_affine(8)
    assert prof.cost.step_s([], 8, 9000) == pytest.approx(a + b * 9000, rel=1e-12)
    # A 2k prefill on one CPU core costs tens to hundreds of milliseconds.
    assert 0.02 < prof.cost.step_s([(2048, 0)], 0, 0) < 2.0


def test_cpu_profile_errors_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{\n  oops")
    with pytest.raises(ValueError, match=r"p.json: line 2"):
        load_cpu_profile(bad)
    bad.write_text(json.dumps({"coefficients": {}, "kv_capacity_tokens": 1}))
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        load_cpu_profile(bad)
    doc = {"coefficients": {"overhead_s": -1}, "kv_capacity_tokens": 1, "kv_bytes_per_token": 1}
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="'coefficients'"):
        load_cpu_profile(bad)


def test_ops_csv_errors_name_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "ops.csv"
    path.write_text(
        "op,model,m,ctx,n_bytes,ms,reps\nqkv_proj,x,1,0,0,0.1,5\nqkv_proj,x,2,0,0,abc,5\n"
    )
    with pytest.raises(ValueError, match=r"ops.csv:3: field 'ms'"):
        load_ops_csv(path)
    path.write_text("op,model,m\n")
    with pytest.raises(ValueError, match="lacks columns"):
        load_ops_csv(path)


def test_curve_and_affine_fit() -> None:
    c = Curve([(10, 1.0), (20, 3.0), (40, 4.0)])
    assert c(1) == 1.0  # launch floor below the first point
    assert c(15) == pytest.approx(2.0)
    assert c(60) == pytest.approx(5.0)  # the last segment extended
    a, b = fit_affine([(0, 1.0), (10, 3.0), (20, 5.0)])
    assert (a, b) == pytest.approx((1.0, 0.2))
    assert fit_affine([(0, 5.0), (10, 3.0)])[1] == 0.0  # never a negative slope
