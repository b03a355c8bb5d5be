"""A waiting request's prefix refreshed on arrival, on a real vLLM CPU engine: the plugin
(serve/vllm_refresh_on_arrival.py, loaded through its `vllm.general_plugins` entry point where
`AKVC_REFRESH_ON_ARRIVAL=1`), the simulator's `sim.refresh_on_arrival`
(tests/sim/test_sim_refresh_on_arrival.py) on the engine itself.

The engine runs in a process of its own with vLLM's engine core in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), driven step by step, so that requests arrive exactly where
the scenario needs them; over HTTP the order would rest on timing, and on this machine a 2,000-token
decode takes 1 to 8 s. Tiny model, 128 blocks of 32 tokens, one request running at a time. Session
A sends 24 blocks and pauses; D, another session, sends 24; B then decodes 2,000 tokens (65
blocks), and after its first steps C (24 blocks of its own) and A's next turn (A's 24 blocks and 2
more) arrive and wait, C first. When B ends, C takes blocks from the free queue's head: on vLLM as
it is, the never-used ones, then A's (older than D's, tail first), and A's turn finds 16 of its 24
blocks; refreshed when it arrived, A's blocks queue behind D's, C takes D's, and A's turn finds
all 24. (Measured 2026-12-01: 512 and 768 tokens.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_kvc.serve.launcher import CPU_ENV
from agentic_kvc.serve.vllm_refresh_on_arrival import ENV

pytestmark = pytest.mark.vllm  # about 20 s: two engine starts in-process
BLOCK = 32

SCENARIO = """
import json, random, sys
from vllm import EngineArgs, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.v1.engine.llm_engine import LLMEngine

engine = LLMEngine.from_engine_args(EngineArgs(
    model=sys.argv[1], load_format="dummy", dtype="bfloat16", max_model_len=4096,
    enforce_eager=True, block_size=32, num_gpu_blocks_override=129,
    enable_prefix_caching=True, max_num_seqs=1))
rng = random.Random(3)
def prompt(blocks):
    return TokensPrompt(prompt_token_ids=[rng.randrange(100, 8000) for _ in range(blocks * 32)])
def params(n):
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)
cached = {}
def drain():
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                cached[out.request_id] = out.num_cached_tokens
a = prompt(24)
engine.add_request("a0", a, params(1)); drain()
engine.add_request("d", prompt(24), params(1)); drain()
engine.add_request("b", prompt(2), params(2000))
for _ in range(5):
    engine.step()
engine.add_request("c", prompt(24), params(1))
more = prompt(2)["prompt_token_ids"]
engine.add_request("a1", TokensPrompt(prompt_token_ids=a["prompt_token_ids"] + more), params(1))
drain()
print("RESULT " + json.dumps(cached))
"""


def _run(tiny_model: Path, refresh: bool) -> dict[str, int]:
    # CPU_ENV's fixed KV space: without it the CPU worker refuses to start unless 92% of the
    # machine's memory is free (its default `gpu_memory_utilization`), which other processes
    # on a shared machine can take.
    env = {**os.environ, **CPU_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.pop(ENV, None)
    if refresh:
        env[ENV] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tiny_model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result: dict[str, int] = json.loads(lines[-1][len("RESULT ") :])
    return result


def test_a_queued_turn_keeps_its_prefix_only_with_the_plugin(tiny_model: Path) -> None:
    plain, refreshed = _run(tiny_model, False), _run(tiny_model, True)
    print(f"cached tokens, plain / refreshed: {plain} / {refreshed}")  # with -s
    assert refreshed["a1"] == 24 * BLOCK
    assert plain["a1"] == 16 * BLOCK
    assert plain["c"] == refreshed["c"] == 0 and plain["b"] == refreshed["b"] == 0
