# Sweeps as pipeline targets (issue 33, docs/cluster.md): one job per batch, so that
# `--profile workflow/profiles/slurm` spreads them over a cluster and `--cores N` over a machine
# (with the default profile, `P` below: `--workflow-profile workflow/profiles/default`).
#
#   snakemake $P --cores 2 robustness_sweep        # results/bench/policy_robustness.{json,md}
#   snakemake $P --cores 2 misspec_sweep           # results/bench/policy_misspec.{json,md}
#   snakemake $P --cores 2 results/sweeps/robustness/low_load.json  # one scenario, every seed
#   snakemake --profile workflow/profiles/slurm lifecycle_gpu_grid  # on GPU nodes only
#
# Policy sweeps (benchmarks/policy_robustness.py, policy_misspec.py): a batch is one
# (scenario, seed) with every policy of the sweep (workflow/scripts/sweep_batch.py), writing the
# benchmark's own run cache (RESULTS/robustness, shared by both sweeps and by the scripts run
# by hand); the analysis is the benchmark script itself reading that cache. A misspec batch
# waits for the robustness batch of its (scenario, seed): both need the peers' runs, and two
# jobs must not write one cache file at once.
#
# The lifecycle GPU grid (lifecycle/grids.py `gpu`: 6 C x 7 N x 4 O x 5 reps on
# Qwen3-Coder-30B-A3B): one job per C (the prefix is seeded once per C), each starting P and D
# on two GPUs, then a local merge into RESULTS/lifecycle/gpu. It needs CUDA: never run it here.

include: "sweep_plan.smk"


rule sweep_batch:
    """One (scenario, seed) of a policy sweep: every policy's run, in one process."""
    input:
        script="workflow/scripts/sweep_batch.py",
        bench=lambda wildcards: SWEEP_SCRIPTS[wildcards.sweep],
        traces=sweep_traces,
        after=misspec_after_robustness,
    output:
        f"{RESULTS}/sweeps/{{sweep}}/{{scenario}}/seed{{seed}}.json",
    wildcard_constraints:
        sweep="robustness|misspec",
        scenario=r"[A-Za-z0-9_]+",
        seed=r"\d+",
    params:
        work=SWEEP_WORK,
    # Simulated runs: one core each. The largest scenarios (16 instances, 400 sessions) peak at
    # a few GB; a misspec batch is ~30 runs, a robustness batch 11.
    resources:
        cpus_per_task=1,
        mem_mb=lambda wildcards: 8000 if "fleet16" in wildcards.scenario else 4000,
        runtime=lambda wildcards: 120 if wildcards.sweep == "misspec" else 60,
    benchmark:
        f"{RESULTS}/benchmarks/sweeps/{{sweep}}_{{scenario}}_seed{{seed}}.tsv"
    log:
        f"{RESULTS}/logs/sweeps/{{sweep}}_{{scenario}}_seed{{seed}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input.script:q} {wildcards.sweep} {wildcards.scenario} {wildcards.seed}"
        " --work {params.work:q} --out {output:q} > {log:q} 2>&1"


rule sweep_scenario:
    """One scenario's analysis over all its seeds (the script, reading the filled cache)."""
    input:
        script=lambda wildcards: SWEEP_SCRIPTS[wildcards.sweep],
        batches=scenario_markers,
    output:
        json=f"{RESULTS}/sweeps/{{sweep}}/{{scenario}}.json",
        md=f"{RESULTS}/sweeps/{{sweep}}/{{scenario}}.md",
    wildcard_constraints:
        sweep="robustness|misspec",
        scenario=r"[A-Za-z0-9_]+",
    params:
        work=SWEEP_WORK,
        seeds=lambda wildcards: (
            len(_robustness().SEEDS) if wildcards.sweep == "robustness" else MISSPEC_SEEDS
        ),
    resources:
        cpus_per_task=1,
        mem_mb=4000,
        runtime=30,
    log:
        f"{RESULTS}/logs/sweeps/{{sweep}}_{{scenario}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input.script:q} --scenarios {wildcards.scenario} --seeds {params.seeds}"
        " --work {params.work:q} --out {output.json:q} --md {output.md:q} > {log:q} 2>&1"


rule robustness_sweep:
    """Every scenario of the robustness sweep: results/bench/policy_robustness.{json,md}."""
    input:
        script=SWEEP_SCRIPTS["robustness"],
        batches=robustness_markers,
    output:
        json=f"{RESULTS}/bench/policy_robustness.json",
        md=f"{RESULTS}/bench/policy_robustness.md",
    params:
        work=SWEEP_WORK,
    resources:
        cpus_per_task=1,
        mem_mb=8000,
        runtime=60,
    log:
        f"{RESULTS}/logs/sweeps/robustness.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input.script:q} --scenarios all --work {params.work:q}"
        " --out {output.json:q} --md {output.md:q} > {log:q} 2>&1"


rule misspec_sweep:
    """The misspecification sweep's default set (6 held-out workloads x 3 seeds)."""
    input:
        script=SWEEP_SCRIPTS["misspec"],
        batches=misspec_markers,
    output:
        json=f"{RESULTS}/bench/policy_misspec.json",
        md=f"{RESULTS}/bench/policy_misspec.md",
    params:
        work=SWEEP_WORK,
        scenarios=",".join(MISSPEC_DEFAULT),
        seeds=MISSPEC_SEEDS,
    resources:
        cpus_per_task=1,
        mem_mb=8000,
        runtime=60,
    log:
        f"{RESULTS}/logs/sweeps/misspec.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input.script:q} --scenarios {params.scenarios} --seeds {params.seeds}"
        " --work {params.work:q}"
        " --out {output.json:q} --md {output.md:q} > {log:q} 2>&1"


# A configured benchmark of the same name (config bench.scripts) would make the same file.
ruleorder: robustness_sweep > bench_script
ruleorder: misspec_sweep > bench_script


rule lifecycle_gpu_part:
    """One C of the GPU lifecycle grid: P and D (one GPU each), 28 (N, O) cells x 5 reps."""
    output:
        f"{RESULTS}/lifecycle/gpu_parts/C{{c}}/summary.csv",
    wildcard_constraints:
        c="|".join(str(c) for c in LIFECYCLE_GPU_CS),
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    # Two engines of a 30B MoE model (one H100/H200-class GPU each); the weights load once
    # per job, then 140 measured requests. The plugin turns `gpu` into sbatch --gpus.
    resources:
        gpu=2,
        machine=WHOLE_MACHINE,
        cpus_per_task=8,
        mem_mb=128000,
        runtime=180,
    log:
        f"{RESULTS}/logs/lifecycle_gpu_C{{c}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc lifecycle run --grid gpu --c {wildcards.c} --out {params.out:q} > {log:q} 2>&1"


rule lifecycle_gpu_grid:
    """The GPU grid, merged: RESULTS/lifecycle/gpu/{records, summary.csv, calibration.json}."""
    input:
        expand(f"{RESULTS}/lifecycle/gpu_parts/C{{c}}/summary.csv", c=LIFECYCLE_GPU_CS),
    output:
        f"{RESULTS}/lifecycle/gpu/summary.csv",
    params:
        parts=lambda wildcards, input: [str(Path(p).parent) for p in input],
        out=lambda wildcards, output: Path(output[0]).parent,
    localrule: True
    log:
        f"{RESULTS}/logs/lifecycle_gpu_merge.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python workflow/scripts/lifecycle_merge.py {params.parts:q} --out {params.out:q}"
        " > {log:q} 2>&1"
