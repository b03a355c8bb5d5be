"""Faults of the KV tier on a real vLLM CPU engine (issue 30): no lost or wrong answer.

One engine with a disk tier (our SimpleCPUOffloadConnector, `fleet.kv_tiers.disk_gib`) whose
directory is a small tmpfs mounted for this module where the machine allows it (root), so that
"disk full" is the kernel's own ENOSPC. Per fault, a session is spilled out of HBM and its next
turn sent; the answer must equal a cold recompute of the same prompt (a fresh `cache_salt`),
and the engine's counters say where its tokens came from:

- connector error (the test's fault file: every store fails): the worker reports the failed
  blocks, the scheduler side drops them from the tier's pool: no disk-sourced hit, a recompute;
- a load that fails (fault file `load_error`): vLLM is told the engine blocks are invalid
  (`kv_load_failure_policy: recompute`), the tier blocks are dropped from the pool, and the
  retried request is computed (it completes, with the cold answer);
- tier path gone (the directory removed while the engine runs): the open file lives on, so
  the tier still serves, correctly;
- disk full (the tmpfs filled by another file): every store fails with ENOSPC, the blocks are
  dropped from the tier's pool as above, and the prompt is recomputed.

A path that cannot be created at start is a clear error before any engine starts
(tests/serve/test_kv_tier_flags.py).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_kvc.config import KVTiersConfig
from agentic_kvc.serve.host_copy_offload_connector import FAULT_FILE_ENV
from agentic_kvc.serve.launcher import VllmFleet
from tests.integration.test_real_vllm_kv_tier import BLOCK, complete, counters, small_engine

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.reliability]
PROMPT = 3000
DISK_SOURCE = "vllm:prompt_tokens_cached_by_source_total[disk]"
COMPUTED = "vllm:prompt_tokens_by_source_total[local_compute]"


@pytest.fixture(scope="module")
def tier_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, bool]]:
    """(the disk tier's directory, whether it is a 64 MiB tmpfs this module mounted)."""
    root = tmp_path_factory.mktemp("kv_tier_fs")
    ok = (
        shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(root)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield root, ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(root)], capture_output=True)


@pytest.fixture(scope="module")
def engine(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, tier_dir: tuple[Path, bool]
) -> Iterator[tuple[VllmFleet, Path, Path]]:
    fault_file = tmp_path_factory.mktemp("kv_tier_fault") / "fault"
    disk = tier_dir[0] / "kv"
    cfg = small_engine(
        tiny_model,
        # 64 MiB of slots in a 64 MiB file system: the file is sparse, so it fills as written
        # (the tests before the disk-full one use about 40 MiB of it).
        kv_tiers=KVTiersConfig(disk_gib=1 / 16, disk_path=str(disk), write_through=True),
        vllm_env={FAULT_FILE_ENV: str(fault_file)},
    )
    logs = tmp_path_factory.mktemp("kv_tier_fault_logs")
    with VllmFleet.from_config(cfg, logs, device="cpu", startup_timeout_s=400) as fleet:
        yield fleet, fault_file, disk
    assert fleet.remaining_pids() == set()


def _spilled_turn(fleet: VllmFleet, seed: int) -> tuple[dict, dict, dict[str, float]]:
    """A session's first turn, two prompts that push it out of HBM, then its next turn and a
    cold recompute of that turn: (next turn, cold, counter deltas of the next turn)."""
    url, model = fleet.urls[0], fleet.model_name
    rng = random.Random(seed)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(100, 8000) for _ in range(n)]

    session = prompt(PROMPT)
    complete(url, model, session)
    for _ in range(2):
        complete(url, model, prompt(PROMPT))
    turn2 = session + prompt(64)
    before = counters(url)
    got = complete(url, model, turn2)
    after = counters(url)
    cold = complete(url, model, turn2, salt=f"cold-{seed}")
    return got, cold, {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def test_healthy_disk_tier_serves_the_spilled_prefix(engine: tuple[VllmFleet, Path, Path]) -> None:
    got, cold, delta = _spilled_turn(engine[0], 1)
    want = (PROMPT // BLOCK) * BLOCK
    assert got["cached"] == want and delta[DISK_SOURCE] == want, delta
    assert got["text"] == cold["text"]


def test_connector_error_falls_back_to_recompute(engine: tuple[VllmFleet, Path, Path]) -> None:
    fleet, fault_file, _ = engine
    fault_file.write_text("store_error")
    try:
        got, cold, delta = _spilled_turn(fleet, 2)
    finally:
        fault_file.unlink()
    assert got["text"] == cold["text"]
    assert delta.get(DISK_SOURCE, 0) == 0, delta
    assert delta[COMPUTED] >= PROMPT, delta  # the whole prompt was computed again
    assert fleet.all_alive()
    # The fault is gone: the tier serves again.
    got, cold, delta = _spilled_turn(fleet, 3)
    assert delta[DISK_SOURCE] == (PROMPT // BLOCK) * BLOCK and got["text"] == cold["text"]


def test_failed_load_is_recomputed_and_the_request_completes(
    engine: tuple[VllmFleet, Path, Path],
) -> None:
    fleet, fault_file, _ = engine
    fault_file.write_text("load_error")
    try:
        got, cold, _ = _spilled_turn(fleet, 6)  # each request times out after 120 s
    finally:
        fault_file.unlink()
    assert got["text"] == cold["text"]
    assert fleet.all_alive()
    got, cold, delta = _spilled_turn(fleet, 7)
    assert delta[DISK_SOURCE] == (PROMPT // BLOCK) * BLOCK and got["text"] == cold["text"]


def test_tier_path_removed_while_running_keeps_answers_right(
    engine: tuple[VllmFleet, Path, Path],
) -> None:
    fleet, _, disk = engine
    shutil.rmtree(disk)
    got, cold, delta = _spilled_turn(fleet, 4)
    assert got["text"] == cold["text"]
    # The engine keeps its open (now unlinked) file: the tier still gives the prefix back.
    assert delta[DISK_SOURCE] == (PROMPT // BLOCK) * BLOCK, delta
    assert fleet.all_alive()


def test_disk_full_falls_back_to_recompute(
    engine: tuple[VllmFleet, Path, Path], tier_dir: tuple[Path, bool]
) -> None:
    root, mounted = tier_dir
    if not mounted:
        pytest.skip("no small file system to fill (mounting a tmpfs needs root)")
    fleet = engine[0]
    filler = root / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    try:
        got, cold, delta = _spilled_turn(fleet, 5)
    finally:
        filler.unlink()
    assert got["text"] == cold["text"]
    assert delta.get(DISK_SOURCE, 0) == 0, delta
    assert delta[COMPUTED] >= PROMPT, delta
    assert fleet.all_alive()
