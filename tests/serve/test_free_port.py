"""Server ports come from below the kernel's ephemeral range, skip held ports, never repeat."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agentic_kvc.serve import ports
from agentic_kvc.serve.ports import LOOPBACK, free_port


def _range_file(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "ip_local_port_range"
    f.write_text(text)
    return f


def test_ports_lie_below_the_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", _range_file(tmp_path, "32768\t60999\n"))
    got = [free_port() for _ in range(50)]
    assert len(set(got)) == 50  # never handed out twice
    assert all(10_000 <= p < 32_768 for p in got)
    for p in got:  # each was free when picked
        with socket.socket() as s:
            s.bind((LOOPBACK, p))


def test_a_held_port_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", _range_file(tmp_path, "32768 60999"))
    with socket.socket() as held, socket.socket() as probe:
        held.bind((LOOPBACK, 0))  # someone else's socket: the real bind check must refuse it
        taken = held.getsockname()[1]
        probe.bind((LOOPBACK, 0))
        free = probe.getsockname()[1]
        probe.close()
        proposals = iter([taken, taken, free])
        monkeypatch.setattr(ports._RANDOM, "randint", lambda a, b: next(proposals))
        ports._HANDED_OUT.discard(free)
        assert free_port() == free


@pytest.mark.parametrize("text", ["1024 65535", "", "not numbers"])
def test_no_room_or_unknown_range_asks_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", _range_file(tmp_path, text))
    assert ports._server_port_range() is None
    p = free_port()
    with socket.socket() as s:
        s.bind((LOOPBACK, p))


def test_a_missing_range_file_asks_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", tmp_path / "absent")
    assert ports._server_port_range() is None
    assert free_port() > 0
