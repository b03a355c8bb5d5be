"""The tier media (host memory, disk) of serve/host_copy_offload_connector.py, no engine."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from agentic_kvc.serve.host_copy_offload_connector import (
    DiskMedium,
    HostMemoryMedium,
    HostTierWorkerMetadata,
    read_fault,
    transfer_event,
)


def _engine(blocks: int = 6) -> dict[str, torch.Tensor]:
    """Two KV regions as vLLM's worker sees them: [num_blocks, block_bytes] int8 views."""
    g = torch.Generator().manual_seed(0)
    return {
        "k": torch.randint(-128, 127, (blocks, 64), dtype=torch.int8, generator=g),
        "v": torch.randint(-128, 127, (blocks, 32), dtype=torch.int8, generator=g),
    }


def test_host_copy_round_trip() -> None:
    eng = _engine()
    want = {n: t.clone() for n, t in eng.items()}
    host = {n: torch.zeros((4, t.shape[1]), dtype=t.dtype) for n, t in eng.items()}
    medium = HostMemoryMedium(eng, host)
    assert medium.copy([1, 3], [0, 2], is_store=True) == set()
    for t in eng.values():
        t.zero_()
    assert medium.copy([2, 0], [5, 4], is_store=False) == set()
    for n in eng:
        assert torch.equal(eng[n][5], want[n][3]) and torch.equal(eng[n][4], want[n][1])
        assert not eng[n][0].any()  # untouched blocks stay as they were


def test_disk_round_trip_and_one_file_per_slot_size(tmp_path: Path) -> None:
    eng = _engine()
    want = {n: t.clone() for n, t in eng.items()}
    path = str(tmp_path / "sub" / "kv.rank_0")
    disk = DiskMedium(eng, path, num_slots=8)
    assert disk.slot_bytes == 96 and os.path.getsize(path) == 8 * 96
    assert disk.copy([0, 5], [7, 1], is_store=True) == set()
    for t in eng.values():
        t.zero_()
    assert disk.copy([1, 7], [2, 3], is_store=False) == set()
    for n in eng:
        assert torch.equal(eng[n][2], want[n][5]) and torch.equal(eng[n][3], want[n][0])
    disk.shutdown()
    assert not os.path.exists(path)


def test_disk_full_marks_slots_bad_and_their_loads_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = _engine()
    disk = DiskMedium(eng, str(tmp_path / "kv.rank_0"), num_slots=4)
    disk.copy([0], [0], is_store=True)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full)
    disk.copy([1, 2], [1, 2], is_store=True)
    assert disk.bad_slots == {1, 2} and disk.write_errors == 2
    monkeypatch.undo()
    # Slot 0 was written before the disk filled; slots 1 and 2 were not.
    assert disk.copy([0, 1, 2], [3, 4, 5], is_store=False) == {4, 5}
    disk.copy([3], [1], is_store=True)  # a later good write heals the slot
    assert disk.bad_slots == {2}
    disk.shutdown()


def test_disk_path_that_cannot_be_opened_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RuntimeError, match=r"fleet\.kv_tiers\.disk_path"):
        DiskMedium(_engine(), str(blocker / "kv.rank_0"), num_slots=2)


def test_worker_report_merges_failed_stores() -> None:
    a = HostTierWorkerMetadata(completed_store_events={1: 1}, failed_store_blocks=[4, 2])
    b = HostTierWorkerMetadata(completed_store_events={1: 1, 2: 1}, failed_store_blocks=[2, 9])
    m = a.aggregate(b)
    assert m.completed_store_events == {1: 2, 2: 1} and m.failed_store_blocks == [2, 4, 9]


def test_fault_file(tmp_path: Path) -> None:
    f = tmp_path / "fault"
    assert read_fault(str(f)) is None and read_fault(None) is None
    f.write_text("store_error\n")
    assert read_fault(str(f)) == "store_error"
    f.write_text("melt")
    with pytest.raises(ValueError, match="unknown KV tier fault"):
        read_fault(str(f))


def test_stores_can_be_reported_in_flight_as_asynchronous_copies() -> None:
    """Host copies are done when launched; with `store_polls` (STORE_POLLS_ENV at the worker's
    start) a store answers "in flight" to that many polls (as a CUDA copy after the step's
    compute), a load never does."""
    assert transfer_event(is_store=True).query()
    store = transfer_event(is_store=True, store_polls=2)
    assert [store.query() for _ in range(4)] == [False, False, True, True]
    assert transfer_event(is_store=False, store_polls=2).query()
