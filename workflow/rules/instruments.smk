# The instruments' report sections (docs/instruments.md): counterfactual regret, cache-view
# error, several routers. One small simulated experiment per instrument, described in
# config/instruments.yaml, run in one process by `akvc instruments` (about 30 s on one core);
# notebooks/study_{regret,cache_view,routers}.py read its JSONL files (config notebook_inputs).

INSTRUMENT_FILES = [
    f"{RESULTS}/instruments/{name}.jsonl" for name in ("regret", "cache_view", "routers")
]


rule instruments:
    """Regret, cache-view error and router replicas over config/instruments.yaml's policies."""
    input:
        spec="config/instruments.yaml",
    output:
        INSTRUMENT_FILES,
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    log:
        f"{RESULTS}/logs/instruments.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc instruments {input.spec:q} --out {params.out:q} > {log:q} 2>&1"
