# REPORT.md from the records of every complete planned run (fresh or archived), the notebooks'
# outputs, and any benchmark JSON present (results/bench/*.json).

import hashlib

# Benchmarks marked `in_report` are inputs (built by this DAG). Every other benchmark JSON is
# read but deliberately not an input, or `report` would run slow or peer-dependent benchmarks;
# their content hashes are params instead, so the report is re-rendered exactly when such a
# file appears, changes or goes away. (In-report ones must stay out of the hashes: hashed at
# parse time, before the DAG writes them, they would make every second run rework.)
# The archived ones (ARCHIVE/bench, shown when the checkout has not re-run them) likewise.
BENCH_DIGESTS = {
    f"{p.parent.parent.name}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    for p in sorted(
        [*Path(RESULTS, "bench").glob("*.json"), *Path(ARCHIVE, "bench").glob("*.json")]
    )
    if p not in {Path(b) for b in REPORT_BENCH}
}


rule report:
    """The default target: REPORT.md and every run it reads.

    The runs are named here, not only as inputs of render_report, because Snakemake does not
    rebuild a deleted intermediate file whose consumers are up to date; as targets, a deleted
    run's requests.jsonl is regenerated (and then REPORT.md with it).
    """
    default_target: True
    input:
        "REPORT.md",
        run_outputs("requests.jsonl"),
        expand(f"{RESULTS}/notebooks/{{notebook}}.ipynb", notebook=config["notebooks"]),
    localrule: True


# The figures REPORT.md links to, copied here by render_report: committed beside REPORT.md so
# the report shows them on any checkout (results/ is not committed). Not a declared output:
# Snakemake would mark a directory output with a timestamp file; render_report clears the
# images it published before and writes the current ones.
REPORT_FIGURES = "report_figures"

# The code that turns records into REPORT.md (ANALYSIS_CODE, common.smk) and its renderer.
REPORT_CODE = checkout_files([*ANALYSIS_CODE, "workflow/scripts/render_report.py"])


rule render_report:
    """Render REPORT.md (and the per-run page it links to); every number in them is computed
    from the runs' requests.jsonl."""
    input:
        template="workflow/report/REPORT.md.j2",
        runs_template="workflow/report/RUNS.md.j2",
        plan=PLAN_FILE,
        records=run_outputs("requests.jsonl") + archived_records(),
        notebooks=expand(f"{RESULTS}/notebooks/{{notebook}}.ipynb", notebook=config["notebooks"]),
        bench=REPORT_BENCH,
        code=REPORT_CODE,
    output:
        report="REPORT.md",
        runs=f"{RESULTS}/report/runs.md",
    params:
        # RESULTS, derived from the plan's path (results/work/plan.json).
        results=lambda wildcards, input: Path(input.plan).parents[1],
        # A function, not the string: archived records are inputs, and a hardcoded prefix of
        # inputs is what the linter flags (the archive is a folder the rule only reads).
        archive=lambda wildcards: ARCHIVE,
        bench=BENCH_DIGESTS,
        sections=" ".join(f"--section {name}" for name in config["sections"]),
        figures=REPORT_FIGURES,
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python workflow/scripts/render_report.py --template {input.template:q}"
        " --plan {input.plan:q} --results {params.results:q} --archive {params.archive:q}"
        " {params.sections} --out {output.report:q} --runs-out {output.runs:q}"
        " --figures-out {params.figures:q} > {log:q} 2>&1"
