# EPD (docs/epd.md): default vs encode/prefill-decode disaggregation of a multimodal model in
# simulation, A100 (derived) and H100 (measured), 4 loads x 3 runs; about 10 s on one core.


rule epd_bench:
    """Records and summary for notebooks/study_epd.py."""
    output:
        f"{RESULTS}/epd/records.jsonl",
        f"{RESULTS}/epd/summary.json",
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    log:
        f"{RESULTS}/logs/epd_bench.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python -m agentic_kvc.epd.bench --out {params.out:q} --hardware a100 --hardware h100"
        " > {log:q} 2>&1"
