"""Every reader rejects a malformed row with its file, line number and field.

One property test for all formats: take N well-formed rows of a format, put one bad row at a
random position, and the error must name the bad row's physical line (CSV headers count as
line 1) and, where a field is at fault, that field. Both with the format given and with
auto-detection when the first line is still good.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.workload import WorkloadFormatError, read_workload


@dataclass(frozen=True)
class Case:
    fmt: str
    header: str | None  # a line before the rows (CSV header, native header)
    good: Callable[[int], str]  # row i (unique ids where the format needs them)
    bad: tuple[tuple[str, str | None], ...]  # (row text, field at fault or None)


_ISO = "2025-06-01T12:00:0{}Z"

CASES = {
    "mooncake": Case(
        "mooncake",
        None,
        lambda i: (
            f'{{"timestamp": {i}, "input_length": 600, "output_length": 3, '
            f'"hash_ids": [0, {i + 1}]}}'
        ),
        (
            ("{not json", None),
            ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "hash_ids"),
            (
                '{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
                "timestamp",
            ),
        ),
    ),
    "bailian": Case(
        "bailian",
        None,
        lambda i: (
            f'{{"chat_id": {i}, "parent_chat_id": {i - 1 if i else -1}, "timestamp": {i}, '
            f'"input_length": 40, "output_length": 5, "turn": {i + 1}, "hash_ids": [1, 2, 3]}}'
        ),
        (
            ("[1, 2]", None),
            (
                '{"chat_id": 999, "parent_chat_id": -1, "timestamp": 1, "input_length": 2.5, '
                '"output_length": 5}',
                "input_length",
            ),
            (
                '{"chat_id": 998, "parent_chat_id": -7, "timestamp": 1, "input_length": 2, '
                '"output_length": 5}',
                "parent_chat_id",
            ),
        ),
    ),
    "native": Case(
        "native",
        '{"format": "akvc-workload", "meta": {}, "version": 1}',
        lambda i: (
            f'{{"arrival_s": {i}.0, "blocks": [[{i}, 10]], "input_tokens": 10, '
            f'"output_tokens": 2, "parent_id": null, "request_id": "r{i}", "session_id": "s{i}", '
            f'"think_s": 0.0, "turn": 0}}'
        ),
        (
            (
                '{"arrival_s": 0.0, "blocks": [[1, 0]], "input_tokens": 0, "output_tokens": 2, '
                '"parent_id": null, "request_id": "x", "session_id": "x", "think_s": 0.0, '
                '"turn": 0}',
                "blocks[0]",
            ),
            (
                '{"arrival_s": 0.0, "blocks": [], "input_tokens": 3, "output_tokens": 2, '
                '"parent_id": null, "request_id": "", "session_id": "x", "think_s": 0.0, '
                '"turn": 0}',
                "request_id",
            ),
        ),
    ),
    "tracelab": Case(
        "tracelab",
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms",
        lambda i: f"s{i},{i * 1000},0,0,100,20,50",
        (
            ("x1,0,0,0,abc,20,50", "input_len"),
            ("x2,0,0,0,100,20,-5", "tool_wait_after_ms"),
            (",0,0,0,100,20,5", "session_id"),
        ),
    ),
    "tracelab-rounds": Case(
        "tracelab-rounds",
        None,
        lambda i: (
            f'{{"session_id": "s{i}", "round_index": 0, "prefix_tokens": 0, '
            f'"newly_append_tokens": 50, "output_tokens": 5, '
            f'"timing_events": [{{"timestamp": "{_ISO.format(i % 10)}"}}]}}'
        ),
        (
            (
                '{"session_id": "x", "round_index": 0, "prefix_tokens": 0, '
                '"newly_append_tokens": 5, "timing_events": []}',
                "timing_events",
            ),
            (
                '{"session_id": "x", "round_index": 0, "prefix_tokens": 0, '
                '"newly_append_tokens": 5, "timing_events": [{"timestamp": "yesterday"}]}',
                "timing_events.timestamp",
            ),
        ),
    ),
    "azure": Case(
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        lambda i: f"2023-11-16 18:15:4{i % 10}.6805900,{100 + i},20",
        (
            ("not-a-time,100,20", "TIMESTAMP"),
            ("2023-11-16 18:15:46.1,-3,20", "ContextTokens"),
            ("2023-11-16 18:15:46.1,100,", "GeneratedTokens"),
        ),
    ),
}


@settings(max_examples=15, deadline=None)
@pytest.mark.parametrize("name", sorted(CASES))
@given(n_rows=st.integers(1, 6), bad_at=st.integers(0, 6), pick=st.integers(0, 10))
def test_reader_names_the_bad_line_and_field(
    tmp_path_factory: pytest.TempPathFactory, name: str, n_rows: int, bad_at: int, pick: int
) -> None:
    case = CASES[name]
    bad_text, field = case.bad[pick % len(case.bad)]
    rows = [case.good(i) for i in range(n_rows)]
    at = min(bad_at, n_rows)
    rows.insert(at, bad_text)
    lines = ([case.header] if case.header else []) + rows
    bad_line = at + 1 + (1 if case.header else 0)
    path = tmp_path_factory.mktemp("bad") / "trace.txt"  # formats are told by content
    path.write_text("\n".join(lines) + "\n")
    # Auto-detection needs a good first line; with a header or a good first row it has one.
    formats = [case.fmt] + (["auto"] if case.header or at > 0 else [])
    for fmt in formats:
        with pytest.raises(WorkloadFormatError) as err:
            read_workload(path, fmt)
        assert err.value.line == bad_line, (fmt, str(err.value))
        assert str(err.value).startswith(f"{path}:{bad_line}: ")
        if field is not None:
            assert err.value.field == field, str(err.value)
            assert repr(field) in str(err.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_good_rows_alone_read(tmp_path: Path, name: str) -> None:
    """The good rows above are indeed good: the failures come from the bad row only."""
    case = CASES[name]
    rows = [case.good(i) for i in range(4)]
    path = tmp_path / "ok.txt"
    path.write_text("\n".join(([case.header] if case.header else []) + rows) + "\n")
    assert len(read_workload(path, case.fmt)) == 4
    assert len(read_workload(path)) == 4
