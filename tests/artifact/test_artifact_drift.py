"""A claim's reference is what REPORT.md prints on its line; README.md's and ARTIFACT.md's
times are artifact/measured.yaml's. Drift is found, and `akvc artifact sync` removes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agentic_kvc.artifact.drift import drift, report_value, sync
from agentic_kvc.artifact.registry import load_registry
from tests.artifact.pipeline_helpers import REPO, akvc

REPORT = """# results

- unified vs round_robin, TTFT p90: -44.9% [-59.4, -30.7] (5 paired replicates)
| C: adaptive v1 T=40k | 1831 | 2276 | 5926 | -6.7% [-13.1, -0.2] | -4.4% [-10.9, -0.6] |
- Lifecycle: PD - colocated TTFT at (C, N, O) max: +26.8 ms [+20.7, +32.9].
"""


def test_report_value_reads_the_first_interval_after_the_prefix() -> None:
    assert report_value(REPORT, "| C: adaptive v1 T=40k |") == pytest.approx(
        (-0.067, -0.131, -0.002)
    )
    assert report_value(REPORT, "- Lifecycle: PD - colocated", "ms") == pytest.approx(
        (26.8, 20.7, 32.9)
    )
    assert report_value(REPORT, "- no such line") is None


def test_shipped_claims_state_what_the_committed_report_prints() -> None:
    """Every claim's reference and interval equal REPORT.md's line at its printed precision.
    After `make report` moves a number, `akvc artifact sync` brings the registry and
    ARTIFACT.md back in step (and this test with them)."""
    reg = load_registry(REPO / "artifact" / "claims.yaml")
    found = drift(reg, (REPO / "REPORT.md").read_text())
    assert found == [], "\n".join(f"{d.claim_id}: {d.registry} vs {d.report}" for d in found)
    # Every claim but the simulated twin whose interval only its own file shows has a line.
    assert sum("report_line" in c.spec for c in reg.claims) >= len(reg.claims) - 1


def _copy(tmp_path: Path, report: str) -> Path:
    shutil.copytree(REPO / "artifact", tmp_path / "artifact")
    (tmp_path / "REPORT.md").write_text(report)
    return tmp_path


def _registry_for(root: Path, claims: list[dict]) -> Path:
    path = root / "artifact" / "claims.yaml"
    data = yaml.safe_load(path.read_text())
    data["claims"] = claims
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=200, default_flow_style=None))
    return path


def _claim(cid: str, line: str, ref: float, iv: list[float], unit: str = "relative") -> dict:
    reg = yaml.safe_load((REPO / "artifact" / "claims.yaml").read_text())
    base = next(c for c in reg["claims"] if c["id"] == "C1")
    return {
        **base,
        "id": cid,
        "target": f"claim_{cid}",
        "report_line": line,
        "reference": ref,
        "reference_interval": iv,
        **({"unit": unit} if unit != "relative" else {}),
    }


def test_drift_is_found_and_sync_removes_it(tmp_path: Path) -> None:
    root = _copy(tmp_path, REPORT)
    path = _registry_for(
        root,
        [
            _claim("C1", "- unified vs round_robin, TTFT p90:", -0.449, [-0.594, -0.307]),
            _claim("C4", "| C: adaptive v1 T=40k |", -0.07, [-0.131, -0.002]),  # stale value
            _claim("C14", "- Lifecycle: PD - colocated", 554.9, [532.1, 577.7], "ms"),  # stale
        ],
    )
    reg = load_registry(path)
    assert [d.claim_id for d in drift(reg, REPORT)] == ["C4", "C14"]
    before = path.read_text()
    assert sync(path, reg, REPORT) == ["C4", "C14"]
    after = load_registry(path)
    assert drift(after, REPORT) == []
    c4, c14 = after.get("C4").spec, after.get("C14").spec
    assert c4["reference"] == -0.067 and c4["reference_interval"] == [-0.131, -0.002]
    assert c14["reference"] == 26.8 and c14["reference_interval"] == [20.7, 32.9]
    # Only those two claims' numbers changed; the rest of the file is as written.
    changed = [
        (a, b) for a, b in zip(before.splitlines(), path.read_text().splitlines(), strict=True)
    ]
    assert sum(a != b for a, b in changed) == 3  # C4: reference; C14: reference, interval


def test_sync_check_fails_on_drift_and_a_missing_line(tmp_path: Path) -> None:
    root = _copy(tmp_path, REPORT)
    _registry_for(
        root,
        [
            _claim("C1", "- unified vs round_robin, TTFT p90:", -0.449, [-0.594, -0.307]),
            _claim("C2", "- gone from the report:", -0.3, [-0.4, -0.2]),
        ],
    )
    out = akvc(root, "artifact", "sync", "--check")
    assert out.returncode == 1 and "C2" in out.stdout and "no REPORT.md line" in out.stdout
    # The missing line cannot be synced: the command says so and fails.
    out = akvc(root, "artifact", "sync")
    assert out.returncode == 1 and "still not in REPORT.md: C2" in out.stderr


def test_readme_and_artifact_quote_the_measured_make_report_time() -> None:
    measured = yaml.safe_load((REPO / "artifact" / "measured.yaml").read_text())
    minutes = f"{measured['make_report']['minutes']:.1f} min"
    readme = (REPO / "README.md").read_text()
    assert f"`make report` took {minutes}" in readme
    assert measured["make_report"]["when"].split()[1] in readme  # the same measurement
    artifact = (REPO / "ARTIFACT.md").read_text()
    assert f"`make report`, which builds every run the claims read: {minutes}" in artifact
    sec = measured["kick_the_tires"]["seconds"]
    assert f"PASS in {sec // 60} min {sec % 60} s" in artifact.replace("\n", " ")
