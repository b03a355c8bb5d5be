# Notebooks: jupytext percent .py -> papermill with parameters -> executed notebook,
# plus the tables (CSV/JSON) and figures (PNG) each notebook writes.


rule notebook_ipynb:
    """Convert a jupytext percent-format notebook to .ipynb (unexecuted), for rules that run
    papermill on the file itself (the full lifecycle grid)."""
    input:
        "notebooks/{notebook}.py",
    output:
        f"{RESULTS}/work/notebooks/{{notebook}}.ipynb",
    log:
        f"{RESULTS}/logs/notebooks/{{notebook}}.jupytext.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        "jupytext --to ipynb --output {output:q} {input:q} > {log:q} 2>&1"


rule notebook:
    """Execute one analysis notebook over every complete planned run (jupytext + papermill in
    one process: workflow/scripts/run_notebook.py)."""
    input:
        notebook="notebooks/{notebook}.py",
        plan=PLAN_FILE,
        records=lambda wildcards: runs_read_by(wildcards.notebook, "requests.jsonl"),
        samples=lambda wildcards: runs_read_by(wildcards.notebook, "instances.jsonl"),
        # A section's own data (config notebook_inputs), e.g. a microbenchmark's summary.
        extra=lambda wildcards: config["notebook_inputs"].get(wildcards.notebook, []),
        code=checkout_files([*ANALYSIS_CODE, "workflow/scripts/run_notebook.py"]),
    output:
        notebook=f"{RESULTS}/notebooks/{{notebook}}.ipynb",
        tables=directory(f"{RESULTS}/tables/{{notebook}}"),
        figures=directory(f"{RESULTS}/figures/{{notebook}}"),
    params:
        # RESULTS, derived from the plan's path (results/work/plan.json).
        results=lambda wildcards, input: Path(input.plan).parents[1],
        # A function, not the string: archived records are inputs, and a hardcoded prefix of
        # inputs is what the linter flags (the archive is a folder the rule only reads).
        archive=lambda wildcards: ARCHIVE,
    log:
        f"{RESULTS}/logs/notebooks/{{notebook}}.papermill.log",
    conda:
        "../../envs/akvc.yaml"
    shell:
        # A notebook that makes no figure still leaves its (empty) figures folder.
        "mkdir -p {output.tables:q} {output.figures:q} && "
        "python workflow/scripts/run_notebook.py {input.notebook:q} {output.notebook:q}"
        " -p results_dir {params.results:q} -p archive_dir {params.archive:q}"
        " -p plan_path {input.plan:q}"
        " -p tables_dir {output.tables:q} -p figures_dir {output.figures:q}"
        " > {log:q} 2>&1"
