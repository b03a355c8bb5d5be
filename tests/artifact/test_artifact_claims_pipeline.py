"""claim_<id> targets end to end on small simulated runs: each makes only its runs and writes
its JSON, a second call does nothing, and a perturbed reference flips the verdict and the
check's exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.artifact.pipeline_helpers import SMALL_CONFIG, akvc, small_claim, snakemake


def _setup(root: Path, claims: list[dict]) -> None:
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(SMALL_CONFIG))
    reg = yaml.safe_load((root / "artifact" / "claims.yaml").read_text())
    reg["claims"] = claims
    (root / "artifact" / "claims.yaml").write_text(yaml.safe_dump(reg, sort_keys=False))


def _jobs(out) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        line.split()[-1].rstrip(":")
        for line in (out.stdout + out.stderr).splitlines()
        if line.startswith(("rule ", "localrule "))
    ]


@pytest.mark.slow  # about 1-2 min on 2 loaded cores: four Snakemake calls, eight simulated runs
def test_claim_targets_rebuild_only_their_runs_then_do_nothing(pipeline: Path) -> None:
    _setup(pipeline, [small_claim("C1", 0.0, "none"), small_claim("C2", 0.0, "none")])
    out = snakemake(pipeline, "--cores", "1", "claim_C1")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((pipeline / "results/claims/C1.json").read_text())
    assert record["obtained"]["n_pairs"] == 2
    assert record["seeds"] == ["seed=0", "seed=1"]
    assert {r["side"] for r in record["runs"]} == {"baseline", "candidate"}
    assert not (pipeline / "results/claims/C2.json").exists()
    out2 = snakemake(pipeline, "--cores", "1", "claim_C2")
    assert out2.returncode == 0, out2.stderr[-3000:]
    # C2 reads the same runs: only its own evaluation ran, no run job.
    assert [j for j in _jobs(out2) if j.startswith(("sim_batch", "akvc_run"))] == []
    for cid in ("C1", "C2"):
        dry = snakemake(pipeline, "-n", "--cores", "1", f"claim_{cid}")
        assert dry.returncode == 0
        assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]
    # The evaluator's view: every claim output captioned with its id in the HTML report.
    rep = snakemake(pipeline, "--cores", "1", "claims", "--report", "report.html")
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (pipeline / "report.html").read_text()
    for cid in ("C1", "C2"):
        assert f"Claim <strong>{cid}</strong>" in html


@pytest.mark.slow  # about 1-2 min: five Snakemake calls
def test_perturbed_reference_flips_verdict_and_exit_code(pipeline: Path) -> None:
    _setup(pipeline, [small_claim("C1", 0.0, "none")])
    assert snakemake(pipeline, "--cores", "1", "claim_C1").returncode == 0
    got = json.loads((pipeline / "results/claims/C1.json").read_text())["obtained"]
    lo, hi = got["ci_low"], got["ci_high"]
    direction = "lower" if hi < 0 else "higher" if lo > 0 else "none"
    # The registry as the obtained value says: reproduced, check passes.
    _setup(pipeline, [small_claim("C1", round(got["value"], 3), direction)])
    assert snakemake(pipeline, "--cores", "1", "claim_C1").returncode == 0
    assert json.loads((pipeline / "results/claims/C1.json").read_text())["verdict"] == "reproduced"
    ok = akvc(pipeline, "artifact", "check")
    assert ok.returncode == 0, ok.stdout
    # A perturbed reference, 20 points off (tolerance 5): not reproduced, non-zero exit.
    _setup(pipeline, [small_claim("C1", round(got["value"], 3) + 0.2, direction)])
    bad = akvc(pipeline, "artifact", "check")
    assert bad.returncode == 1 and "not reproduced" in bad.stdout
    # The claim target reruns (its spec changed) and records the same verdict.
    out = snakemake(pipeline, "--cores", "1", "claim_C1")
    assert out.returncode == 0 and "claim" in _jobs(out)
    assert (
        json.loads((pipeline / "results/claims/C1.json").read_text())["verdict"] == "not reproduced"
    )


def test_every_buildable_claim_has_a_target(pipeline: Path) -> None:
    """A dry run of `claims` plans one claim job per claim whose experiments are planned."""
    _setup(pipeline, [small_claim("C1", 0.0, "none"), small_claim("C2", 0.0, "none")])
    out = snakemake(pipeline, "-n", "--cores", "1", "claims")
    assert out.returncode == 0, out.stderr[-3000:]
    assert _jobs(out).count("claim") == 2
