# Benchmarks: `snakemake --cores 1 bench` runs each benchmarks/<name>.py listed under
# config["bench"]["scripts"] as `python benchmarks/<name>.py --out results/bench/<name>.json ARGS`.
# Those marked `in_report` (cheap, offline) are also inputs of `report`; the others (e.g. one
# that reads a downloaded trace) run only with `bench`. Benchmarks that need the peers' venv or
# real servers are not listed: run them by hand, and the report shows their JSON all the same.

# name -> {"args": [...], "inputs": [...], "in_report": bool}, with defaults filled in.
BENCH = {
    name: {"args": [], "inputs": [], "in_report": False, **(spec or {})}
    for name, spec in config["bench"]["scripts"].items()
}
for _name in BENCH:
    if not Path(workflow.basedir, "benchmarks", f"{_name}.py").is_file():
        raise WorkflowError(
            f"config bench.scripts.{_name}: benchmarks/{_name}.py does not exist"
        )

BENCH_OUTPUTS = {name: f"{RESULTS}/bench/{name}.json" for name in BENCH}
REPORT_BENCH = [BENCH_OUTPUTS[name] for name, spec in BENCH.items() if spec["in_report"]]


rule bench_script:
    """Run one benchmark script; it writes its numbers to the JSON file given by --out."""
    input:
        script="benchmarks/{bench}.py",
        data=lambda wildcards: BENCH[wildcards.bench]["inputs"],
    output:
        f"{RESULTS}/bench/{{bench}}.json",
    wildcard_constraints:
        # Only configured benchmarks: any other results/bench/*.json is someone's own file.
        bench="|".join(BENCH) or "(?!)",
    params:
        args=lambda wildcards: shlex.join(BENCH[wildcards.bench]["args"]),
    resources:
        machine=WHOLE_MACHINE,  # a benchmark times itself: nothing runs beside it
    log:
        f"{RESULTS}/logs/bench/{{bench}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input.script:q} --out {output:q} {params.args} > {log:q} 2>&1"


rule bench:
    """Every benchmark listed in config["bench"]["scripts"]."""
    input:
        list(BENCH_OUTPUTS.values()),
    localrule: True
