"""The EPD report section regenerates from the benchmark's records."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from agentic_kvc.analysis.studies import epd
from agentic_kvc.epd.bench import main


def test_section_from_bench_records(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["--out", str(tmp_path), "--runs", "2", "--loads", "20,40"])
    assert res.exit_code == 0, res.output
    s = epd.analyse(tmp_path)
    assert len(s.findings) == 2 and all("median TPOT" in f for f in s.findings)
    assert "Theirs" in s.theirs and "| 1000 | epd | 69.1" in s.theirs
    assert epd.analyse(tmp_path / "missing").answer.startswith("No records")
