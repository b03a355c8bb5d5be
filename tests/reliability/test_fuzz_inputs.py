"""Hypothesis fuzzing of what users feed in: trace files and run configs.

Whatever the bytes, a reader either returns a workload or raises WorkloadFormatError (which
names file, line and field), and the config loader either returns a RunConfig or raises
ConfigError: never a KeyError, TypeError or IndexError from deep inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_kvc.config import ConfigError, load_config
from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import READERS, read_workload

# CI runs a quick pass; `make test-reliability` sets AKVC_FUZZ_EXAMPLES higher.
EXAMPLES = int(os.environ.get("AKVC_FUZZ_EXAMPLES", "50"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Keys each format reads, so generated rows look enough like the real thing to get past the
# first check and into the field parsing, where type confusion bites.
FORMAT_KEYS = {
    "mooncake": ["timestamp", "input_length", "output_length", "hash_ids"],
    "agentic-mooncake": [
        "request_id", "session_id", "timestamp", "input_length", "output_length", "hash_ids",
        "wait_for", "branches", "tool_wait_ms", "block_size", "schema",
    ],
    "bailian": ["chat_id", "parent_chat_id", "timestamp", "input_length", "output_length",
                "hash_ids", "turn", "type"],
    "tracelab-rounds": ["session_id", "round_index", "prefix_tokens", "newly_append_tokens",
                        "output_tokens", "timestamp"],
    "native": ["format", "version", "session_id", "request_id", "turn", "input_tokens",
               "output_tokens", "blocks", "arrival_s", "think_s"],
}  # fmt: skip
CSV_HEADERS = {
    "tracelab": ["session_id", "round_idx", "prefix_len", "append_len", "output_len", "ts"],
    "azure": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _rows(keys: list[str]) -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.fixed_dictionaries({}, optional={k: values for k in keys})
    return st.lists(row, min_size=1, max_size=5)


def _check_reader(fmt: str, text: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        for f in (fmt, "auto"):
            with contextlib.suppress(WorkloadFormatError):
                read_workload(path, f)


@pytest.mark.parametrize("fmt", sorted(FORMAT_KEYS))
@FUZZ
@given(data=st.data())
def test_json_trace_readers_fail_only_with_format_errors(fmt: str, data: st.DataObject) -> None:
    rows = data.draw(_rows(FORMAT_KEYS[fmt]))
    lines = [json.dumps(r, allow_nan=True) for r in rows]
    if data.draw(st.booleans()):  # and sometimes a torn or garbage line
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(st.text(max_size=20)))
    _check_reader(fmt, "\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", sorted(CSV_HEADERS))
@FUZZ
@given(data=st.data())
def test_csv_trace_readers_fail_only_with_format_errors(fmt: str, data: st.DataObject) -> None:
    header = CSV_HEADERS[fmt]
    cell = st.one_of(st.integers(-5, 10**6).map(str), st.floats().map(str), st.text(max_size=6))
    rows = data.draw(st.lists(st.lists(cell, min_size=0, max_size=len(header) + 1), max_size=5))
    text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    _check_reader(fmt, text)


@FUZZ
@given(blob=st.binary(max_size=300))
def test_any_bytes_are_a_format_error_or_a_workload(blob: bytes) -> None:
    for fmt in READERS:
        _check_reader(fmt, blob)


CONFIG_KEYS = {
    "backend": st.sampled_from(["sim", "vllm", "gpu", 3]),
    "seed": values,
    "repeat": values,
    "workload": st.one_of(
        values,
        st.fixed_dictionaries(
            {},
            optional={
                "trace": values,
                "generator": st.one_of(
                    values,
                    st.fixed_dictionaries({}, optional={"sessions": values, "preset": values}),
                ),
                "mode": st.sampled_from(["closed", "open", "other"]),
                "window_s": values,
                "token_scale": values,
                "max_sessions": values,
            },
        ),
    ),
    "fleet": st.one_of(
        values,
        st.fixed_dictionaries(
            {},
            optional={
                "instances": values,
                "roles": values,
                "vllm_env": values,
                "vllm_args": values,
            },
        ),
    ),
    "policy": st.one_of(
        values,
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["unified", "round_robin", "nope"]) | values,
                "params": values,
            },
        ),
    ),
    "replay": values,
}


@FUZZ
@given(
    cfg=st.fixed_dictionaries({}, optional=CONFIG_KEYS),
    junk=st.dictionaries(st.text(max_size=5), values, max_size=2),
)
def test_config_loader_fails_only_with_config_errors(
    cfg: dict[str, Any], junk: dict[str, Any]
) -> None:
    for data in (cfg, {**junk, **cfg}):
        with contextlib.suppress(ConfigError):
            load_config(data)


@FUZZ
@given(text=st.text(max_size=200), overrides=st.lists(st.text(max_size=20), max_size=3))
def test_config_files_and_overrides_fail_only_with_config_errors(
    text: str, overrides: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_text(text)
        for over in ([], overrides):
            with contextlib.suppress(ConfigError):
                load_config(path, over)
    # and a valid YAML mapping with the overrides applied on top
    with contextlib.suppress(ConfigError):
        load_config(yaml.safe_load("workload: {generator: {sessions: 2}}"), overrides)
