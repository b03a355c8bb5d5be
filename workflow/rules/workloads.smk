# Public traces: `snakemake --cores 1 traces` puts every known trace under results/traces/,
# each checked against the sha256 recorded in agentic_kvc.workload.fetch.PUBLIC_TRACES.
# A local copy is used when a folder holds it under its upstream name: config["traces_dir"]
# (optional; e.g. --config traces_dir=../shared/traces) or AKVC_TRACES_DIR; otherwise the
# file is downloaded from its upstream URL. Trace files are never committed to the repo.
# Large optional traces (PublicTrace.default is False, e.g. the 132 MB Bailian coder trace)
# are left out of `traces`; ask for one by its file: results/traces/qwen_coder_blksz_16.jsonl.

from agentic_kvc.workload.fetch import PUBLIC_TRACES

TRACES_DIR = config.get("traces_dir") or ""
# A trace lands at results/traces/<upstream file name>; configs point workload.trace there.


wildcard_constraints:
    trace_file="|".join(spec.file_name.replace(".", r"\.") for spec in PUBLIC_TRACES.values()),


rule fetch_trace:
    """Copy (local folder) or download (upstream URL) one public trace; verify its sha256."""
    output:
        f"{RESULTS}/traces/{{trace_file}}",
    params:
        name=lambda wc: next(n for n, s in PUBLIC_TRACES.items() if s.file_name == wc.trace_file),
        local=f"--local-dir {TRACES_DIR}" if TRACES_DIR else "",
    log:
        f"{RESULTS}/logs/traces/{{trace_file}}.log",
    localrule: True
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc workload fetch {params.name} -o {output:q} {params.local} > {log:q} 2>&1"


rule trace_stats:
    """Statistics of one trace (`akvc workload stats --json`), for the report and for checks."""
    input:
        f"{RESULTS}/traces/{{trace_file}}",
    output:
        f"{RESULTS}/traces/{{trace_file}}.stats.json",
    log:
        f"{RESULTS}/logs/traces/{{trace_file}}.stats.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "akvc workload stats --json {input:q} > {output:q} 2> {log:q}"


rule traces:
    """Every public trace that can be had here, with its statistics."""
    input:
        [
            f"{RESULTS}/traces/{spec.file_name}{suffix}"
            for spec in PUBLIC_TRACES.values()
            if spec.default and (spec.url or TRACES_DIR or os.environ.get("AKVC_TRACES_DIR"))
            for suffix in ("", ".stats.json")
        ],
    localrule: True
