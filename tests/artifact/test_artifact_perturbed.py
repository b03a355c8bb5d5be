"""A claim can fail: perturbing one run's records so the claim's value moves past what it
allows makes `akvc artifact check` (what `make claims-check` runs) fail, for each kind of
claim: a value with a tolerance, a direction only, an equivalence within a margin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.artifact.pipeline_helpers import SMALL_CONFIG, akvc, small_claim, snakemake

PLAN = "results/work/plan.json"


def _setup(root: Path, claims: list[dict]) -> None:
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(SMALL_CONFIG))
    reg = yaml.safe_load((root / "artifact" / "claims.yaml").read_text())
    reg["claims"] = claims
    (root / "artifact" / "claims.yaml").write_text(yaml.safe_dump(reg, sort_keys=False))


def _runs(root: Path) -> dict[tuple[str, int], Path]:
    out = {}
    for m in (root / "results" / "runs").glob("*/manifest.json"):
        cfg = json.loads(m.read_text())["config"]
        out[(cfg["policy"]["name"], int(cfg["seed"]))] = m.parent / "requests.jsonl"
    return out


def _read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _set_candidate(root: Path, factor: dict[int, float]) -> None:
    """Each candidate (lmetric) request's TTFT = its baseline twin's times factor[seed]."""
    runs = _runs(root)
    for seed, f in factor.items():
        base = {r["request_id"]: r["ttft_s"] for r in _read(runs[("round_robin", seed)])}
        recs = _read(runs[("lmetric", seed)])
        for r in recs:
            if r.get("ttft_s") is not None and base.get(r["request_id"]) is not None:
                r["ttft_s"] = base[r["request_id"]] * f
        runs[("lmetric", seed)].write_text("".join(json.dumps(r) + "\n" for r in recs))


def _check(root: Path, claim: dict) -> tuple[int, str]:
    _setup(root, [claim])
    built = akvc(
        root,
        "artifact",
        "claim",
        "C1",
        "--plan",
        PLAN,
        "--results",
        "results",
        "--archive",
        "results/archive",
        "--out",
        "results/claims/C1.json",
    )
    assert built.returncode == 0, built.stderr[-2000:]
    out = akvc(root, "artifact", "check")
    return out.returncode, out.stdout


def _kind(kind: str) -> dict:
    c = small_claim("C1", -0.5, "lower")
    if kind == "direction":
        c["tolerance"] = {"kind": "direction"}
    if kind == "equivalence":
        c.update(direction="none", equivalence_margin=0.1, reference=0.02)
    return c


@pytest.mark.slow  # about 1-2 min: one Snakemake call (four small simulated runs), then akvc
@pytest.mark.parametrize(
    ("kind", "good", "perturbed"),
    [
        ("value", {0: 0.5, 1: 0.5}, {0: 0.8}),  # -50% -> about -35%: past the 5 points
        ("direction", {0: 0.5, 1: 0.5}, {0: 3.0}),  # one run 3x slower: no longer lower
        ("equivalence", {0: 1.02, 1: 1.02}, {0: 1.5}),  # one run 50% slower: out of +/-10%
    ],
)
def test_one_perturbed_run_fails_the_claims_check(
    pipeline: Path, kind: str, good: dict[int, float], perturbed: dict[int, float]
) -> None:
    _setup(pipeline, [small_claim("C1", 0.0, "none")])
    assert snakemake(pipeline, "--cores", "1", "claim_C1").returncode == 0
    _set_candidate(pipeline, good)
    rc, out = _check(pipeline, _kind(kind))
    assert rc == 0, out
    _set_candidate(pipeline, perturbed)  # one run's records (seed 0) only
    rc, out = _check(pipeline, _kind(kind))
    assert rc == 1 and "not reproduced" in out, out
