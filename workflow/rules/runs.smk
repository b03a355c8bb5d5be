# Simulated runs: one job per batch of up to `sim_batch` (24) (`akvc run-batch`), because a simulated run
# takes about as long as starting Python; deleting one simulated run's records redoes its
# batch (seconds). Real runs with a `repeat`: one job per experiment, repeat by repeat on one
# fleet started once (about 35 s saved per run on 2 cores; caches reset before each run).
# Other real runs: one job each, `akvc run BASE --set ... --results RESULTS`.
# The run_id already hashes the whole resolved config, so the config files are not inputs; a
# run is redone when an output is missing (e.g. a deleted requests.jsonl) or, for simulated
# runs, when the simulator's profile data change. `akvc run` itself clears an incomplete run
# directory and redoes it, and is a no-op on a complete one.


rule plan:
    """The experiment plan (runs, overrides, labels) that notebooks and the report read."""
    output:
        PLAN_FILE,
    params:
        plan=PLAN.to_json(),
    log:
        f"{RESULTS}/logs/plan.log",
    localrule: True
    run:
        from agentic_kvc.io import atomic_write_json

        atomic_write_json(output[0], params.plan)
        Path(log[0]).write_text(f"{len(params.plan['runs'])} planned runs\n")


rule akvc_run:
    """Run one resolved config into results/runs/<run_id>/ (any backend: sim or vllm)."""
    input:
        sim_profile_inputs,
        trace_inputs,
    output:
        requests=f"{RESULTS}/runs/{{run_id}}/requests.jsonl",
        instances=f"{RESULTS}/runs/{{run_id}}/instances.jsonl",
        summary=f"{RESULTS}/runs/{{run_id}}/summary.json",
        manifest=f"{RESULTS}/runs/{{run_id}}/manifest.json",
    wildcard_constraints:
        run_id="|".join(UNBATCHED_IDS) or "(?!)",
    params:
        akvc=config["akvc"],
        base=lambda wildcards: PLAN.first(wildcards.run_id).base,
        overrides=override_flags,
        # RESULTS, derived from the output path (results/runs/<run_id>/requests.jsonl).
        results=lambda wildcards, output: Path(output.requests).parents[2],
    priority: run_priority
    resources:
        gpu=run_resource("gpu", 0),
        machine=machine_share,
        runtime=run_resource("runtime", 60),
        mem_mb=run_resource("mem_mb", 4000),
    # Wall time per job: `akvc artifact timing` checks the claims' declared compute minutes.
    benchmark:
        f"{RESULTS}/benchmarks/runs/{{run_id}}.tsv"
    log:
        f"{RESULTS}/logs/runs/{{run_id}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "{params.akvc} run {params.base:q} {params.overrides} --results {params.results:q}"
        " > {log:q} 2>&1"


for _batch, _runs in SIM_BATCHES.items():

    rule:
        name:
            f"sim_batch_{_batch.replace('.', '_').replace('-', '_')}"
        input:
            sorted({p for r in _runs for p in sim_profile_files(r) + trace_files(r)}),
        output:
            [
                f"{RESULTS}/runs/{r.run_id}/{name}"
                for r in _runs
                for name in ("requests.jsonl", "instances.jsonl", "summary.json", "manifest.json")
            ],
        params:
            akvc=config["akvc"],
            specs=" ".join(shlex.quote(batch_spec(r)) for r in _runs),
            # RESULTS, derived from the first output (results/runs/<run_id>/requests.jsonl).
            results=lambda wildcards, output: Path(output[0]).parents[2],
        resources:
            runtime=60,
            mem_mb=4000,
        benchmark:
            f"{RESULTS}/benchmarks/batches/{_batch}.tsv"
        log:
            f"{RESULTS}/logs/runs/batch_{_batch}.log",
        conda:
            "../../envs/akvc.yaml"
        shell:
            "{params.akvc} run-batch {params.specs} --results {params.results:q} > {log:q} 2>&1"


for _batch, _runs in REAL_BATCHES.items():

    rule:
        name:
            f"real_batch_{_batch.replace('.', '_').replace('-', '_')}"
        input:
            sorted({p for r in _runs for p in trace_files(r)}),
        output:
            [
                f"{RESULTS}/runs/{r.run_id}/{name}"
                for r in _runs
                for name in ("requests.jsonl", "instances.jsonl", "summary.json", "manifest.json")
            ],
        params:
            akvc=config["akvc"],
            specs=" ".join(shlex.quote(batch_spec(r)) for r in _runs),
            # RESULTS, derived from the first output (results/runs/<run_id>/requests.jsonl).
            results=lambda wildcards, output: Path(output[0]).parents[2],
        priority: batch_priority(_runs)
        resources:
            gpu=max(r.resources.get("gpu", 0) for r in _runs),
            machine=WHOLE_MACHINE,
            runtime=sum(r.resources.get("runtime", 60) for r in _runs),
            mem_mb=max(r.resources.get("mem_mb", 4000) for r in _runs),
        benchmark:
            f"{RESULTS}/benchmarks/batches/{_batch}.tsv"
        log:
            f"{RESULTS}/logs/runs/batch_{_batch}.log",
        conda:
            "../../envs/akvc.yaml"
        shell:
            "{params.akvc} run-batch {params.specs} --results {params.results:q} > {log:q} 2>&1"


rule runs:
    """Every planned run of the enabled experiments (no analysis)."""
    input:
        run_outputs("requests.jsonl"),
    localrule: True
