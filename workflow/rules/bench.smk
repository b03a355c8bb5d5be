# Benchmarks: `snakemake --cores 1 bench` runs each benchmarks/<name>.py listed in
# config["bench"]["scripts"] as `python benchmarks/<name>.py --out results/bench/<name>.json`.
# Not part of `report` (they can be slow); the report shows whatever results/bench/*.json exist.


rule bench_script:
    """Run one benchmark script; it writes its numbers to the JSON file given by --out."""
    input:
        "benchmarks/{bench}.py",
    output:
        f"{RESULTS}/bench/{{bench}}.json",
    log:
        f"{RESULTS}/logs/bench/{{bench}}.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python {input:q} --out {output:q} > {log:q} 2>&1"


rule bench:
    """Every benchmark listed in config["bench"]["scripts"]."""
    input:
        expand(f"{RESULTS}/bench/{{bench}}.json", bench=config["bench"]["scripts"]),
    localrule: True
