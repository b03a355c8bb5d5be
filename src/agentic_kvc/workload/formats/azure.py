"""Azure LLM inference traces (Azure/AzurePublicDataset, CC-BY-4.0): lengths and arrivals.

Format: CSV with `TIMESTAMP` (e.g. `2023-11-16 18:15:46.6805900`), `ContextTokens`,
`GeneratedTokens` (AzureLLMInferenceTrace_{code,conv}.csv of Patel et al., "Splitwise",
ISCA 2024, and the 2024 week-long traces of DynamoLLM). The trace holds no prompt content and
no sessions, so every request is its own session with one unshared block: it exercises load
and length mixes, never prefix reuse.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.common import get_int, iter_csv_rows
from agentic_kvc.workload.model import Block, Request, Session, Workload

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _timestamp(value: str, path: Path, line: int) -> float:
    text = (value or "").strip()
    try:
        return float(text)  # some derived copies store seconds
    except ValueError:
        pass
    # Python 3.11 accepts at most 6 fractional digits; the trace has 7.
    head, dot, frac = text.partition(".")
    try:
        stamp = datetime.fromisoformat(head + (dot + frac[:6] if dot else ""))
    except ValueError:
        raise WorkloadFormatError(path, f"not a timestamp: {value!r}", line, "TIMESTAMP") from None
    return stamp.timestamp()


def read_azure(path: Path) -> Workload:
    rows = []
    for lineno, row in iter_csv_rows(path, COLUMNS):
        ts = _timestamp(row["TIMESTAMP"], path, lineno)
        n_in = get_int(row, "ContextTokens", path, lineno)
        n_out = get_int(row, "GeneratedTokens", path, lineno)
        rows.append((ts, lineno, n_in, n_out))
    rows.sort()
    t0 = rows[0][0] if rows else 0.0
    sessions = []
    for ts, lineno, n_in, n_out in rows:
        req = Request(
            request_id=f"r{lineno}",
            session_id=f"r{lineno}",
            turn=0,
            input_tokens=n_in,
            output_tokens=n_out,
            blocks=(Block(lineno, n_in),) if n_in else (),
            arrival_s=ts - t0,
        )
        sessions.append(Session(req.session_id, [req]))
    return Workload(sessions, meta={"format": "azure", "source": str(path)})
