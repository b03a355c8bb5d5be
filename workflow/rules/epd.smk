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


# Not in the default report (four real vLLM engines, about 5 min of both cores): run it with
# `snakemake --cores 1 epd_real`; the epd section then adds its "real CPU" rows.
rule epd_real:
    """Real default vs EPD on vLLM CPU (tiny BLIP-2, random weights); docs/epd.md."""
    output:
        f"{RESULTS}/epd_real/records.jsonl",
        f"{RESULTS}/epd_real/summary.json",
    params:
        out=lambda wildcards, output: Path(output[0]).parent,
    resources:
        machine=WHOLE_MACHINE,
    log:
        f"{RESULTS}/logs/epd_real.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "python -m agentic_kvc.epd.real --out {params.out:q} --prompts 8 --repeats 3 > {log:q} 2>&1"
