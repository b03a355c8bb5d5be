"""Native format: exact round trip (property test), byte-stable output, located errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.workload import (
    Block,
    Request,
    Session,
    Workload,
    WorkloadFormatError,
    read_workload,
    synthesize,
    write_native,
)
from agentic_kvc.workload.formats.native import dumps_native

_floats = st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False)
_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8)
)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    sessions = []
    for si in range(draw(st.integers(0, 4))):
        sid = f"s{si}-{draw(st.text(min_size=1, max_size=6))}"
        reqs: list[Request] = []
        for turn in range(draw(st.integers(1, 4))):
            blocks = tuple(
                Block(draw(st.integers(0, 2**64 - 1)), draw(st.integers(1, 5000)))
                for _ in range(draw(st.integers(0, 5)))
            )
            n_in = sum(b.tokens for b in blocks) if blocks else draw(st.integers(0, 100))
            reqs.append(
                Request(
                    request_id=f"{sid}/{turn}",
                    session_id=sid,
                    turn=turn,
                    input_tokens=n_in,
                    output_tokens=draw(st.integers(0, 10_000)),
                    blocks=blocks,
                    arrival_s=draw(_floats),
                    think_s=draw(_floats),
                    parent_id=reqs[-1].request_id if reqs else draw(st.none() | st.just("x")),
                )
            )
        sessions.append(Session(sid, reqs))
    meta = draw(st.dictionaries(st.text(max_size=5), _json_scalars, max_size=4))
    return Workload(sessions, meta=meta)


@settings(max_examples=60, deadline=None)
@given(wl=workloads())
def test_native_round_trip_is_exact(tmp_path_factory: pytest.TempPathFactory, wl: Workload) -> None:
    path = tmp_path_factory.mktemp("native") / "w.jsonl"
    write_native(wl, path)
    back = read_workload(path)
    assert back.sessions == wl.sessions
    assert back.meta == wl.meta
    assert dumps_native(back) == path.read_text()  # writing it again gives the same bytes


def test_generator_file_is_byte_identical_per_seed(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_native(synthesize("agentic-coding", 20, seed=7), a)
    write_native(synthesize("agentic-coding", 20, seed=7), b)
    write_native(synthesize("agentic-coding", 20, seed=8), c)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (
            '{"request_id": "a", "session_id": "s", "turn": 0, "arrival_s": 0.0, "think_s": 0.0,'
            ' "input_tokens": 5, "output_tokens": 1, "parent_id": null, "blocks": [[1, 4]]}',
            "input_tokens",
        ),
        (
            '{"request_id": "a", "session_id": "s", "turn": 0, "arrival_s": 0.0, "think_s": 0.0,'
            ' "input_tokens": 4, "output_tokens": 1, "parent_id": null, "blocks": [[1, 0]]}',
            "blocks[0]",
        ),
        (
            '{"request_id": "", "session_id": "s", "turn": 0, "arrival_s": 0.0, "think_s": 0.0,'
            ' "input_tokens": 4, "output_tokens": 1, "parent_id": null, "blocks": [[1, 4]]}',
            "request_id",
        ),
        (
            '{"request_id": "a", "session_id": "s", "turn": 0, "arrival_s": 0.0, "think_s": -1,'
            ' "input_tokens": 4, "output_tokens": 1, "parent_id": null, "blocks": [[1, 4]]}',
            "think_s",
        ),
    ],
)
def test_native_bad_row_names_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"format": "akvc-workload", "version": 1, "meta": {}}\n\n' + line + "\n")
    with pytest.raises(WorkloadFormatError) as err:
        read_workload(path)
    assert err.value.line == 3 and err.value.field == field


def test_native_turns_must_increase(tmp_path: Path) -> None:
    row = (
        '{{"request_id": "{r}", "session_id": "s", "turn": {t}, "arrival_s": 0.0, "think_s": 0.0,'
        ' "input_tokens": 4, "output_tokens": 1, "parent_id": null, "blocks": [[1, 4]]}}\n'
    )
    path = tmp_path / "w.jsonl"
    path.write_text(
        '{"format": "akvc-workload", "version": 1, "meta": {}}\n'
        + row.format(r="a", t=1)
        + row.format(r="b", t=1)
    )
    with pytest.raises(WorkloadFormatError, match=r":3: field 'turn'"):
        read_workload(path)
