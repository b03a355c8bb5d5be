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


def test_real_cpu_rows_come_from_real_records_when_present(tmp_path: Path) -> None:
    import json
    import random

    from agentic_kvc.epd.real import summarize
    from agentic_kvc.serve.hostload import HostLoadSampler

    res = CliRunner().invoke(main, ["--out", str(tmp_path / "epd"), "--runs", "2", "--loads", "20"])
    assert res.exit_code == 0, res.output
    missing = epd.analyse(tmp_path / "epd")
    assert any("Real CPU rows: not in this run" in b for b in missing.blocks)

    rng = random.Random(0)
    recs, sampler = [], HostLoadSampler().start()
    for rep in range(2):
        for mode, tpot in (("default", 0.030), ("epd", 0.015)):
            sampler.mark(f"r{rep}-{mode}")
            for i in range(6):
                t = tpot * rng.uniform(0.9, 1.1)
                recs.append(
                    {"mode": mode, "repeat": rep, "index": i, "ttft_s": rng.uniform(0.2, 0.4)}
                    | {"tpot_s": t, "e2e_s": 1.0, "itl_s": [t] * 3, "output_tokens": 4}
                    | {"wall_s": 2.0}
                )
            sampler.close(f"r{rep}-{mode}")
    recs.append({"mode": "epd", "repeat": 0, "index": 9, "error": "500: boom"})
    real = tmp_path / "epd_real"
    real.mkdir()
    (real / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = {"prompts": 6, "repeats": 2, "max_tokens": 4, "rows": summarize(recs)}
    summary["host_load"] = sampler.stop()
    (real / "summary.json").write_text(json.dumps(summary))

    s = epd.analyse(tmp_path / "epd")
    table = next(b for b in s.blocks if b.startswith("Real CPU"))
    assert table.count("| real CPU |") == 4
    assert [(r["mode"], r["repeat"], r["errors"]) for r in summary["rows"]][2] == ("epd", 0, 1)
    real_findings = [f for f in s.findings if "real CPU" in f]
    assert len(real_findings) == 2
    tpot = next(f for f in real_findings if "median TPOT" in f)
    assert tpot.split("median TPOT ")[1].startswith("-") and "n.s." not in tpot
