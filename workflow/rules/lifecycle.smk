# The PD transfer lifecycle microbenchmark (docs/lifecycle.md): real vLLM on CPU, P and D with
# the logging NIXL connector. The default report runs a small subset (rule lifecycle_default,
# 3x3x2 cells, ~75 s with engine start-up); `snakemake --cores 1 lifecycle` runs the full CPU grid and
# its notebook. Both start real engines: on a shared machine run them one at a time.


rule lifecycle_default:
    """The report's subset (grid `default`): records, summary.csv, calibration.json."""
    output:
        f"{RESULTS}/lifecycle/default/summary.csv",
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    resources:
        machine=WHOLE_MACHINE,
    log:
        f"{RESULTS}/logs/lifecycle_default.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc lifecycle run --grid default --out {params.out:q} > {log:q} 2>&1"


rule lifecycle_cpu_grid:
    """The full scaled CPU grid (grid `cpu`)."""
    output:
        f"{RESULTS}/lifecycle/cpu/summary.csv",
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    resources:
        machine=WHOLE_MACHINE,
    log:
        f"{RESULTS}/logs/lifecycle_cpu.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc lifecycle run --grid cpu --out {params.out:q} > {log:q} 2>&1"


rule lifecycle:
    """Full CPU grid end to end: records, summary, and the notebook over them."""
    input:
        notebook=f"{RESULTS}/work/notebooks/study_lifecycle.ipynb",
        summary=rules.lifecycle_cpu_grid.output,
        decider=f"{RESULTS}/lifecycle/decider_sim_requests.parquet",
    output:
        notebook=f"{RESULTS}/notebooks/study_lifecycle_cpu.ipynb",
        tables=directory(f"{RESULTS}/tables/study_lifecycle_cpu"),
        figures=directory(f"{RESULTS}/figures/study_lifecycle_cpu"),
    params:
        results=lambda wildcards, input: Path(input.summary[0]).parents[2],
    log:
        f"{RESULTS}/logs/notebooks/study_lifecycle_cpu.papermill.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "papermill --kernel python3 --no-progress-bar {input.notebook:q} {output.notebook:q}"
        " -p results_dir {params.results:q} -p lifecycle_grid cpu"
        " -p tables_dir {output.tables:q} -p figures_dir {output.figures:q}"
        " > {log:q} 2>&1"


rule lifecycle_decider_sim:
    """calibrated_split vs fixed split thresholds (256, 2048) in the simulator, 3 rates x 5
    seeds (~20 s CPU): summary rows and every request's latencies (for paired intervals)."""
    output:
        summary=f"{RESULTS}/lifecycle/decider_sim.jsonl",
        requests=f"{RESULTS}/lifecycle/decider_sim_requests.parquet",
    log:
        f"{RESULTS}/logs/lifecycle_decider_sim.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc lifecycle decider-sim --out {output.summary:q} > {log:q} 2>&1"


rule lifecycle_sim_grid:
    """The seeds' GPU grid predicted by the simulator's cost model (H20 profile, < 1 s)."""
    output:
        f"{RESULTS}/lifecycle/sim_grid.csv",
    log:
        f"{RESULTS}/logs/lifecycle_sim_grid.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc lifecycle sim-grid --grid gpu --out {output:q} > {log:q} 2>&1"
