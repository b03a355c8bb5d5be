"""REPORT.md: a results section assembled from the studies' sections and computed tables.

The report opens with the findings (one line each, with its paired interval), then one section
per study, written by the study's notebook from the records (`results/tables/study_<name>/
section.md`, see `analysis.studies`), then the benchmarks (one short table each, the raw JSON
linked), then the appendices: every run's numbers (computed here from its requests.jsonl,
with the workload's hit-rate ceiling beside the measured hit rate) and provenance. Nothing is
copied from summary.json or typed by hand. The simulated parts carry no timestamps, so
unchanged records regenerate them byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from agentic_kvc.analysis.experiments import Plan
from agentic_kvc.analysis.headlines import render_headlines
from agentic_kvc.analysis.load import RunDir, find_runs, requests_frame
from agentic_kvc.analysis.tables import (
    latency_summary,
    token_load_per_instance,
    token_load_summary,
)


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def fmt_num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _latency_cells(row: Mapping[str, Any]) -> dict[str, str]:
    return {
        "requests": str(row["requests"]),
        "errors": str(row["errors"]),
        "ttft_p50": fmt_ms(row["ttft_s_p50"]),
        "ttft_p90": fmt_ms(row["ttft_s_p90"]),
        "ttft_p99": fmt_ms(row["ttft_s_p99"]),
        "tpot_p50": fmt_ms(row["tpot_s_p50"]),
        "tpot_p90": fmt_ms(row["tpot_s_p90"]),
        "e2e_p50": fmt_s(row["e2e_s_p50"]),
        "e2e_p99": fmt_s(row["e2e_s_p99"]),
        "hit_rate": fmt_pct(row["prefix_hit_rate"]),
    }


def hit_ceilings(runs: Iterable[RunDir]) -> dict[str, float | None]:
    """Each run's workload's hit-rate ceiling (infinite cache, the run's block size); None
    where the workload cannot be rebuilt here (e.g. a trace that is not present)."""
    from agentic_kvc.workload.load import hit_rate_ceiling_for

    out: dict[str, float | None] = {}
    for run in runs:
        try:
            out[run.run_id] = hit_rate_ceiling_for(run.config)
        except (OSError, ValueError):
            out[run.run_id] = None
    return out


def run_rows(
    requests: pl.DataFrame, ceilings: Mapping[str, float | None] | None = None
) -> list[dict[str, str]]:
    """One row per run: latency percentiles, hit rate beside the workload's ceiling, and token
    load max/min."""
    lat = latency_summary(requests, ["run_id", "experiment", "variant", "seed", "backend"])
    load = token_load_summary(token_load_per_instance(requests)).select(
        "run_id", "tokens_max", "tokens_min", "max_over_min"
    )
    rows = []
    for row in lat.join(load, on="run_id", how="left").sort("run_id").iter_rows(named=True):
        rows.append(
            {
                "run_id": row["run_id"],
                "experiment": row["experiment"],
                "variant": row["variant"],
                "seed": str(row["seed"]),
                "backend": row["backend"],
                **_latency_cells(row),
                "tok_max": fmt_num(row["tokens_max"]),
                "tok_min": fmt_num(row["tokens_min"]),
                "tok_ratio": fmt_num(row["max_over_min"]),
                "hit_ceiling": fmt_pct((ceilings or {}).get(row["run_id"])),
            }
        )
    return rows


def _workload_text(cfg: Mapping[str, Any]) -> str:
    wl = cfg.get("workload", {})
    if wl.get("trace"):
        return f"trace {Path(wl['trace']).name} ({wl.get('mode', '?')})"
    gen = wl.get("generator") or {}
    return f"generator {gen.get('preset', '?')} x{gen.get('sessions', '?')} ({wl.get('mode', '?')})"


def provenance_rows(runs: Iterable[RunDir]) -> list[dict[str, str]]:
    rows = []
    for run in runs:
        m, cfg = run.manifest, run.config
        git = m.get("git") or {}
        commit = (git.get("commit") or "unknown")[:10]
        dirty = git.get("dirty")
        fleet = cfg.get("fleet", {})
        rows.append(
            {
                "run_id": run.run_id,
                "source": run.source,
                "commit": commit + (" (dirty)" if dirty else "" if dirty is False else " (?)"),
                "backend": str(m.get("backend", cfg.get("backend", "?"))),
                "policy": str(cfg.get("policy", {}).get("name", "?")),
                "seed": str(m.get("seed", cfg.get("seed", "?"))),
                "fleet": f"{fleet.get('instances', '?')} x {fleet.get('model', '?')} "
                f"on {fleet.get('hardware', '?')}",
                "workload": _workload_text(cfg),
                "started": str(m.get("started_at", "?")),
                "wall_s": fmt_num(m.get("wall_s")),
            }
        )
    return rows


# Flags that differ between instances of one fleet by construction (their addresses).
_PER_INSTANCE_FLAGS = ("--host", "--port")


def _engine_flags(argv: list[str]) -> str:
    """The engine's command-line flags (from the first `--flag`), without the launcher part
    and the per-instance address, so a fleet started alike shows one flag set."""
    start = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    out: list[str] = []
    skip = False
    for arg in argv[start:]:
        if skip:
            skip = False
        elif arg in _PER_INSTANCE_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{f}=" for f in _PER_INSTANCE_FLAGS)):
            out.append(arg)
    return " ".join(out)


def real_run_rows(runs: Iterable[RunDir]) -> list[dict[str, str]]:
    """What explains a real-engine run: engine build, device, flags, startup time, logs.

    Read from the manifest's `backend_info` (written by `serve.run_backend.run_vllm`); runs of other
    backends have none and are skipped.
    """
    rows = []
    for run in runs:
        info = run.manifest.get("backend_info") or {}
        fleet = info.get("fleet")
        if not isinstance(fleet, Mapping):
            continue
        vllm = fleet.get("vllm") or {}
        instances = fleet.get("instances") or []
        startups = [i["startup_s"] for i in instances if i.get("startup_s") is not None]
        flag_sets = list(dict.fromkeys(_engine_flags(i.get("argv") or []) for i in instances))
        rows.append(
            {
                "run_id": run.run_id,
                "started": str(run.manifest.get("started_at", "?")),
                "engine": f"{vllm.get('distribution', '?')} {vllm.get('version', '?')}",
                "device": str(fleet.get("device", "?")),
                "instances": str(len(instances)),
                "startup_s": ", ".join(fmt_num(float(s)) for s in startups) or "-",
                "replay_s": fmt_num((info.get("replay") or {}).get("wall_s")),
                "flags": " / ".join(f"`{f}`" for f in flag_sets if f) or "-",
            }
        )
    return rows


def provenance_summary(runs: Iterable[RunDir]) -> list[dict[str, str]]:
    """Runs grouped by where they came from: source, backend, git commit (dirty or not)."""
    groups: dict[tuple[str, str, str], int] = {}
    for row in provenance_rows(runs):
        key = (row["source"], row["backend"], row["commit"])
        groups[key] = groups.get(key, 0) + 1
    return [
        {"source": k[0], "backend": k[1], "commit": k[2], "runs": str(n)}
        for k, n in sorted(groups.items())
    ]


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
# Figures the report links to must stay small (they are committed and read on the web).
MAX_FIGURE_BYTES = 200_000


def publish_figures(
    markdown: str, study: str, figures_dir: Path, report_dir: Path, root: Path
) -> str:
    """Copy every figure `markdown` links to into `figures_dir/<study>/` and link it there,
    relative to the report. A linked file that does not exist is not linked (a broken image
    on every reader's screen): the text says which figure is missing instead. The folder is
    committed beside REPORT.md, so the report shows its figures before any `make report`."""

    def swap(m: re.Match[str]) -> str:
        caption, target = m.group(1), m.group(2)
        if "://" in target:
            return m.group(0)
        src = (root / target) if not Path(target).is_absolute() else Path(target)
        if not src.is_file():
            return f"*(figure not rendered: `{target}` is missing)*"
        dest = figures_dir / study / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != dest.resolve():
            shutil.copyfile(src, dest)
        rel = Path(os.path.relpath(dest, report_dir)).as_posix()
        return f"![{caption}]({rel})"

    return _IMAGE.sub(swap, markdown)


def clear_figures(figures_dir: Path) -> None:
    """Remove the figures a previous render published (only image files; the folder stays),
    so a figure a study no longer draws does not linger in the committed folder."""
    if figures_dir.is_dir():
        for f in figures_dir.rglob("*"):
            if f.is_file() and f.suffix in (".svg", ".png"):
                f.unlink()


def anchor(heading: str) -> str:
    """The fragment GitHub (and most Markdown renderers) give a heading: lower case, spaces
    to hyphens, punctuation but hyphens and underscores dropped."""
    keep = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return "#" + keep.replace(" ", "-")


def study_sections(tables_dir: Path, studies: Iterable[str]) -> list[dict[str, Any]]:
    """Each study's section and findings, as its notebook wrote them; a study whose notebook
    has not written them is listed as missing rather than silently dropped."""
    out = []
    for name in studies:
        d = tables_dir / f"study_{name}"
        md, fj = d / "section.md", d / "findings.json"
        if not md.is_file() or not fj.is_file():
            out.append(
                {
                    "name": name,
                    "title": name,
                    "anchor": anchor(name),
                    "all_findings": [],
                    "question": "",
                    "answer": "",
                    "markdown": "",
                    "findings": [],
                    "missing": str(d),
                }
            )
            continue
        meta = json.loads(fj.read_text())
        answer = meta.get("answer", "")
        title = meta.get("title", name)
        out.append(
            {
                "name": name,
                "title": title,
                "anchor": anchor(title),
                "question": meta.get("question", ""),
                "answer": answer,
                "markdown": md.read_text(),
                # A finding the answer already states word for word is not listed again.
                "findings": [f for f in meta.get("findings", []) if f.rstrip(". ") not in answer],
                "all_findings": list(meta.get("findings", [])),
                "missing": "",
            }
        )
    return out


ARCHIVED_BENCH_NOTE = (
    "Archived benchmark runs (`results/archive/bench/`): benchmarks the default pipeline does "
    "not run (minutes to an hour each, or real engines), from the run committed with this "
    "repository; a checkout's own `results/bench/<name>.json` replaces its archived copy. "
    "`results/archive/bench/README.md` names each file's time, commit and command."
)


def benchmark_markdown(bench_dir: Path, report_dir: Path, archive_dir: Path | None = None) -> str:
    """One short table per benchmark file (figure, goal, verdict; the raw JSON linked): this
    checkout's own, then the archived ones it has not re-run."""
    from agentic_kvc.analysis.bench_summary.render import render_markdown, summarize_benchmarks

    def rendered(d: Path, skip: set[str]) -> str:
        # Links relative to REPORT.md, so they work on any checkout.
        link = Path(os.path.relpath(d, report_dir)).as_posix()
        return render_markdown(summarize_benchmarks(d, skip), link_prefix=f"{link}/")

    own = rendered(bench_dir, set()) if bench_dir.is_dir() else ""
    if archive_dir is None or not archive_dir.is_dir():
        return own
    done = {p.stem for p in bench_dir.glob("*.json")} if bench_dir.is_dir() else set()
    archived = rendered(archive_dir, done)
    if not archived:
        return own
    return (
        f"{own}\n{ARCHIVED_BENCH_NOTE}\n\n{archived}"
        if own
        else f"{ARCHIVED_BENCH_NOTE}\n\n{archived}"
    )


def build_context(
    results: Path,
    archive: Path | None,
    plan: Plan | None,
    report_dir: Path,
    sections: Iterable[str] = (),
    figures_dir: Path | None = None,
    runs_page: Path | None = None,
) -> dict[str, Any]:
    """Everything the template shows; `sections` are report sections that are not experiment
    studies (a microbenchmark's, an instrument's), placed after the studies. With
    `figures_dir`, the figures the sections link to are published there (see
    `publish_figures`)."""
    run_ids = plan.run_ids() if plan is not None else None
    runs = find_runs(results, archive, run_ids)
    requests = requests_frame(runs, plan)
    found = {r.run_id for r in runs}
    missing = [r for r in (run_ids or []) if r not in found]
    names = [*(plan.studies() if plan else []), *sections]
    studies = study_sections(results / "tables", list(dict.fromkeys(names)))
    if figures_dir is not None:
        clear_figures(figures_dir)
        for st in studies:
            st["markdown"] = publish_figures(
                st["markdown"], st["name"], figures_dir, report_dir, Path.cwd()
            )
    real = real_run_rows(runs)
    bench_dirs = [results / "bench", *([archive / "bench"] if archive else [])]
    by_study = {st["name"]: st["all_findings"] for st in studies}
    anchors = {st["name"]: st["anchor"] for st in studies}
    headlines = [
        {
            "label": h.label,
            "text": h.text,
            "link": anchors.get(h.study, "#benchmarks"),
        }
        for h in render_headlines(by_study, bench_dirs)
    ]
    page = runs_page if runs_page is not None else results / "report" / "runs.md"
    return {
        "runs_page": Path(os.path.relpath(page, report_dir)).as_posix(),
        "headlines": headlines,
        "n_runs": len(runs),
        "n_archived": sum(r.source == "archive" for r in runs),
        "n_requests": requests.height,
        "missing": missing,
        "studies": studies,
        "runs": run_rows(requests, hit_ceilings(runs)) if requests.height else [],
        "provenance": provenance_summary(runs),
        "real_runs": real,
        "real_started": sorted(
            str(r.manifest.get("started_at", "?"))
            for r in runs
            if r.config.get("backend") == "vllm"
        ),
        "bench": benchmark_markdown(
            results / "bench", report_dir, archive / "bench" if archive else None
        ),
    }


def render(template: Path, context: Mapping[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.parent)),
        undefined=jinja2.StrictUndefined,  # a misspelt field fails loudly, not as a blank cell
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML
    )
    return env.get_template(template.name).render(**context)
