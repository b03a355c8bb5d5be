"""What a claim's Snakemake target needs: the plan's runs of its experiments, nothing more."""

from __future__ import annotations

from collections.abc import Collection

from agentic_kvc.analysis.experiments import Plan
from agentic_kvc.artifact.registry import Claim


def buildable(claim: Claim, plan: Plan) -> bool:
    """Whether the plan has every experiment the claim reads (a finding claim: always)."""
    planned = {r.experiment for r in plan.runs}
    return claim.kind == "finding" or all(e in planned for e in claim.experiments)


def claim_inputs(
    claim: Claim, plan: Plan, to_run: Collection[str], results: str, archive: str
) -> list[str]:
    """A paired claim's run records (made by the pipeline, or archived); a finding claim's
    section notebook."""
    if claim.kind == "finding":
        return [f"{results}/notebooks/study_{claim.spec['study']}.ipynb"]
    ids = dict.fromkeys(r.run_id for r in plan.runs if r.experiment in claim.experiments)
    return [
        f"{results}/runs/{r}/requests.jsonl" if r in to_run else f"{archive}/{r}/requests.jsonl"
        for r in ids
    ]
