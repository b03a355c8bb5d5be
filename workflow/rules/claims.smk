# Claims (artifact/claims.yaml): one target per claim, `snakemake --cores 1 claim_<id>`, that
# rebuilds only the runs of the claim's experiments and writes results/claims/<id>.json
# (obtained vs reference, paired interval, verdict). `claims` builds every claim whose
# experiments are in the plan. Each claim's spec is a param, so editing one claim reruns it alone.

from agentic_kvc.artifact.registry import load_registry
from agentic_kvc.artifact.targets import buildable, claim_inputs

CLAIMS = {
    c.id: c for c in load_registry(Path(workflow.basedir, "artifact/claims.yaml")).claims
}
CLAIM_IDS = [cid for cid, c in CLAIMS.items() if buildable(c, PLAN)]
_TO_RUN = set(RUN_IDS)


rule claim:
    """Rebuild one claim from its runs' raw records: results/claims/<id>.json."""
    input:
        plan=PLAN_FILE,
        records=lambda wildcards: claim_inputs(
            CLAIMS[wildcards.claim_id], PLAN, _TO_RUN, RESULTS, ARCHIVE
        ),
    output:
        report(
            f"{RESULTS}/claims/{{claim_id}}.json",
            caption="../report/claim.rst",
            category="Claims",
            subcategory=lambda wildcards: CLAIMS[wildcards.claim_id].spec["study"],
            labels=lambda wildcards: {
                "claim": wildcards.claim_id,
                "tier": CLAIMS[wildcards.claim_id].tier,
            },
        ),
    wildcard_constraints:
        claim_id="|".join(CLAIM_IDS) or "(?!)",
    params:
        spec=lambda wildcards: CLAIMS[wildcards.claim_id].to_json(),
        statement=lambda wildcards: CLAIMS[wildcards.claim_id].statement,
        tier=lambda wildcards: CLAIMS[wildcards.claim_id].tier,
        # RESULTS, derived from the plan's path (results/work/plan.json).
        results=lambda wildcards, input: Path(input.plan).parents[1],
        archive=lambda wildcards: ARCHIVE,
    benchmark:
        f"{RESULTS}/benchmarks/claims/{{claim_id}}.tsv"
    log:
        f"{RESULTS}/logs/claims/{{claim_id}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc artifact claim {wildcards.claim_id:q} --plan {input.plan:q}"
        " --results {params.results:q} --archive {params.archive:q} --out {output:q} > {log:q} 2>&1"


for _cid in CLAIM_IDS:

    rule:
        name:
            f"claim_{_cid}"
        input:
            f"{RESULTS}/claims/{_cid}.json",
        localrule: True


rule claims:
    """Every claim of artifact/claims.yaml whose experiments are in the plan."""
    input:
        expand(f"{RESULTS}/claims/{{claim_id}}.json", claim_id=CLAIM_IDS),
    localrule: True
