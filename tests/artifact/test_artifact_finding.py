"""`finding` claims: read from a section's findings.json line, in % or in ms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentic_kvc.artifact.check import check
from agentic_kvc.artifact.evaluate import evaluate, write_claim
from agentic_kvc.artifact.registry import Claim, Registry, load_registry
from agentic_kvc.artifact.verdict import DIRECTION_ONLY, NOT_REPRODUCED, REPRODUCED, verdict

REPO = Path(__file__).resolve().parents[2]
LINES = [
    "Lifecycle: PD - colocated TTFT at (C, N, O) max: +554.9 ms [+532.1, +577.7].",
    "Lifecycle decider (sim H20, 1.0 sessions/s, 5 seeds): calibrated_split vs threshold_2048 "
    "TTFT p90 -29.8% [-39.8, -18.6].",
    "epd, h100, 100 prompts: EPD vs default median TPOT -64.1% [-66.5, -59.9], median TTFT "
    "+7.9% [-3.4, +9.9] n.s. (paired by request)",
]


def _claim(cid: str, finding: str, reference: float, direction: str, **extra) -> Claim:  # type: ignore[no-untyped-def]
    return Claim(
        {
            "id": cid,
            "study": "demo",
            "statement": "A finding claim of a test section.",
            "target": f"claim_{cid}",
            "kind": "finding",
            "finding": finding,
            "metric": "m",
            "direction": direction,
            "reference": reference,
            "tolerance": {"kind": "absolute", "value": 0.05},
            "tier": "sim",
            "minutes": {"human": 1, "compute": 1},
            **extra,
        }
    )


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "tables" / "study_demo"
    folder.mkdir(parents=True)
    (folder / "findings.json").write_text(json.dumps({"findings": LINES}))
    return tmp_path


def test_relative_finding_takes_the_first_interval_of_its_line(results: Path) -> None:
    rec = evaluate(_claim("C1", "epd, h100, 100 prompts", -0.641, "lower"), results, None, results)
    assert rec["obtained"]["value"] == pytest.approx(-0.641)
    assert (rec["obtained"]["ci_low"], rec["obtained"]["ci_high"]) == pytest.approx(
        (-0.665, -0.599)
    )
    assert rec["verdict"] == REPRODUCED and rec["unit"] == "relative"


def test_ms_finding_keeps_milliseconds_and_prints_them(results: Path) -> None:
    claim = _claim(
        "C2",
        "Lifecycle: PD - colocated",
        554.9,
        "higher",
        unit="ms",
        tolerance={"kind": "direction"},
        tier="cpu-real",
    )
    rec = evaluate(claim, results, None, results)
    assert rec["obtained"]["value"] == pytest.approx(554.9)
    assert rec["verdict"] == DIRECTION_ONLY
    out = results / "claims"
    write_claim(rec, out / "C2.json")
    row = check(Registry({}, [claim]), out)[0]
    assert row.obtained == "+554.9 ms [+532.1, +577.7]" and row.reference == "+554.9 ms"


def test_a_line_without_an_interval_in_the_claims_unit_is_an_error(results: Path) -> None:
    # The lifecycle line carries ms, not %: a relative claim on it must not read a number.
    with pytest.raises(ValueError, match=r"findings\.json: no finding starting with .* relative"):
        evaluate(_claim("C3", "Lifecycle: PD - colocated", 5.5, "higher"), results, None, results)
    with pytest.raises(ValueError, match="no finding starting with"):
        evaluate(_claim("C4", "no such line", 0.1, "higher"), results, None, results)
    # A section that has not run: an error naming the file, which the CLI reports cleanly.
    with pytest.raises(ValueError, match=r"study_demo/findings\.json: no such file"):
        evaluate(_claim("C5", "x", 0.1, "higher"), results / "elsewhere", None, results)


def test_ms_tolerance_and_precision_are_in_ms() -> None:
    ms10 = {"kind": "absolute", "value": 10.0}
    assert verdict(554.9, 532.1, 577.7, 554.9, "higher", ms10, "ms")[0] == REPRODUCED
    v, reason = verdict(580.0, 560.0, 600.0, 554.9, "higher", ms10, "ms")
    assert v == NOT_REPRODUCED and "off by more than 10.0 ms" in reason


def test_shipped_finding_claims_name_sections_of_the_report() -> None:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    findings = [c for c in load_registry(REPO / "artifact" / "claims.yaml").claims]
    findings = [c for c in findings if c.kind == "finding"]
    assert {c.spec["study"] for c in findings} >= {"lifecycle", "epd"}
    for c in findings:
        assert f"study_{c.spec['study']}" in cfg["notebooks"], c.id


def test_a_real_finding_the_section_finds_within_the_spread_fails(tmp_path: Path) -> None:
    folder = tmp_path / "tables" / "study_demo"
    folder.mkdir(parents=True)
    line = (
        "Lifecycle: PD - colocated TTFT at (C, N, O) max: +26.8 ms [+20.7, +32.9]; within the "
        "repeats' spread (40% of the mean)."
    )
    (folder / "findings.json").write_text(json.dumps({"findings": [line]}))
    kw = {"unit": "ms", "tolerance": {"kind": "direction"}}
    real = _claim("C3", "Lifecycle: PD - colocated", 26.8, "higher", tier="cpu-real", **kw)
    rec = evaluate(real, tmp_path, None, tmp_path)
    assert rec["verdict"] == NOT_REPRODUCED and "spread" in rec["reason"]
    # A simulated claim on the same line is not judged by the real engines' rule.
    sim = _claim("C4", "Lifecycle: PD - colocated", 26.8, "higher", **kw)
    assert evaluate(sim, tmp_path, None, tmp_path)["verdict"] == DIRECTION_ONLY
