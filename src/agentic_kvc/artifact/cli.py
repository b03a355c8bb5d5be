"""`akvc artifact ...`: claims, their check, the generated appendix, the archive's checksums."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentic_kvc.artifact.registry import REGISTRY, RegistryError, load_registry

_registry_opt = click.option(
    "--registry",
    type=click.Path(path_type=Path, dir_okay=False),
    default=REGISTRY,
    show_default=True,
    help="The claims registry (validated against claims.schema.json beside it).",
)


def _load(registry: Path):  # type: ignore[no-untyped-def]
    try:
        return load_registry(registry)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def artifact() -> None:
    """Paper artifact evaluation: claims registry (artifact/claims.yaml), one verdict per
    claim, ARTIFACT.md generated from the registry, SHA-256 manifest of results/archive."""


@artifact.command("claim")
@click.argument("claim_id")
@_registry_opt
@click.option("--plan", type=click.Path(path_type=Path, exists=True), required=True)
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"))
@click.option("--archive", type=click.Path(path_type=Path), default=Path("results/archive"))
@click.option("--out", type=click.Path(path_type=Path), required=True)
def claim_cmd(
    claim_id: str, registry: Path, plan: Path, results: Path, archive: Path, out: Path
) -> None:
    """Rebuild CLAIM_ID from the runs' raw records and write its JSON (obtained, reference,
    tolerance, replicates, paired interval, verdict). The pipeline calls this; use
    `snakemake --cores 1 claim_<id>` to also make the runs it needs."""
    from agentic_kvc.artifact.evaluate import evaluate, write_claim

    reg = _load(registry)
    try:
        record = evaluate(reg.get(claim_id), results, archive, plan)
    except (KeyError, ValueError) as exc:
        raise click.ClickException(f"claim {claim_id}: {exc}") from None
    write_claim(record, out)
    click.echo(f"{claim_id}: {record['verdict']} ({record['reason']})")


@artifact.command("check")
@_registry_opt
@click.option("--claims-dir", type=click.Path(path_type=Path), default=Path("results/claims"))
@click.option("--only", multiple=True, help="Check only these claim ids (repeatable).")
def check_cmd(registry: Path, claims_dir: Path, only: tuple[str, ...]) -> None:
    """Print every claim's verdict against the registry's current reference; exit 1 when a
    claim is "not reproduced" or was not built."""
    from agentic_kvc.artifact.check import check, passed, table

    rows = check(_load(registry), claims_dir, list(only) or None)
    click.echo(table(rows))
    ok = passed(rows)
    click.echo(
        f"\n{sum(r.verdict != 'not built' for r in rows)}/{len(rows)} claims built; "
        + ("all pass" if ok else "FAILED: a claim is not reproduced or not built")
    )
    sys.exit(0 if ok else 1)


@artifact.command("appendix")
@_registry_opt
@click.option("--out", type=click.Path(path_type=Path), default=Path("ARTIFACT.md"))
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if OUT differs (drift).")
def appendix_cmd(registry: Path, out: Path, check_only: bool) -> None:
    """Generate ARTIFACT.md (the artifact appendix) from the registry."""
    from agentic_kvc.artifact.appendix import render

    text = render(_load(registry))
    if check_only:
        if not out.is_file() or out.read_text() != text:
            raise click.ClickException(
                f"{out} is not what {registry} generates: run `akvc artifact appendix`"
            )
        click.echo(f"{out} matches {registry}")
        return
    out.write_text(text)
    click.echo(f"wrote {out}")


@artifact.command("sync")
@_registry_opt
@click.option(
    "--report", type=click.Path(path_type=Path, dir_okay=False), default=Path("REPORT.md")
)
@click.option("--out", type=click.Path(path_type=Path), default=Path("ARTIFACT.md"))
@click.option("--check", "check_only", is_flag=True, help="Exit 1 on drift; write nothing.")
def sync_cmd(registry: Path, report: Path, out: Path, check_only: bool) -> None:
    """Make every claim's reference the value REPORT.md prints on its `report_line`, then
    regenerate ARTIFACT.md; with --check, list the claims that drifted and exit 1 if any."""
    from agentic_kvc.artifact.appendix import render
    from agentic_kvc.artifact.drift import drift, sync

    reg = _load(registry)
    text = report.read_text()
    found = drift(reg, text)
    for d in found:
        click.echo(f"{d.claim_id}: registry {d.registry}, REPORT.md {d.report}: {d.problem}")
    if check_only:
        if found:
            raise click.ClickException(
                f"{len(found)} claim(s) drifted from {report}: run `akvc artifact sync`"
            )
        click.echo(f"every claim's reference is what {report} prints")
        return
    done = sync(registry, reg, text)
    out.write_text(render(_load(registry)))
    left = drift(_load(registry), text)
    click.echo(f"synced {', '.join(done) or 'nothing'}; wrote {out}")
    if left:
        raise click.ClickException(
            "still not in REPORT.md: " + ", ".join(f"{d.claim_id} ({d.problem})" for d in left)
        )


@artifact.command("manifest")
@click.option("--archive", type=click.Path(path_type=Path), default=Path("results/archive"))
@click.option("--check", "check_only", is_flag=True, help="Verify instead of writing.")
def manifest_cmd(archive: Path, check_only: bool) -> None:
    """Write (or --check) ARCHIVE/MANIFEST.sha256 over every archived file."""
    from agentic_kvc.artifact.manifest import MANIFEST, verify, write

    if check_only:
        problems = verify(archive)
        for p in problems:
            click.echo(p, err=True)
        if problems:
            raise click.ClickException(f"{archive / MANIFEST}: {len(problems)} mismatches")
        click.echo(f"{archive / MANIFEST}: every checksum matches")
        return
    n = write(archive)
    click.echo(f"wrote {archive / MANIFEST} ({n} files)")


@artifact.command("timing")
@_registry_opt
@click.option("--plan", type=click.Path(path_type=Path), default=Path("results/work/plan.json"))
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"))
@click.option("--sim-batch", type=int, default=12, show_default=True)
def timing_cmd(registry: Path, plan: Path, results: Path, sim_batch: int) -> None:
    """Declared compute minutes against the Snakemake benchmark records of the last run
    (results/benchmarks/); flags any claim measured over twice its declared minutes."""
    from agentic_kvc.artifact.timing import measure, timing_table

    rows = measure(_load(registry), plan, results, sim_batch)
    click.echo(timing_table(rows))
    flagged = [r for r in rows if r.flagged]
    if flagged:
        raise click.ClickException(
            "over twice the declared compute minutes: " + ", ".join(r.claim_id for r in flagged)
        )


@artifact.command("bundle")
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--commit", default="HEAD", show_default=True, help="A tag or commit to pack.")
@click.option("--archive", type=click.Path(path_type=Path), default=Path("results/archive"))
@click.option("--claims", type=click.Path(path_type=Path), default=Path("results/claims"))
@click.option("--report", type=click.Path(path_type=Path), default=None)
def bundle_cmd(out: Path, commit: str, archive: Path, claims: Path, report: Path | None) -> None:
    """Pack the code at COMMIT (git archive), the archived raw records, the claims, the HTML
    report and a SHA-256 manifest into one tarball."""
    import subprocess

    from agentic_kvc.artifact.bundle import bundle

    sha = subprocess.run(
        ["git", "rev-parse", commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    n = bundle(out, sha, archive, claims, report)
    click.echo(f"wrote {out} ({n} files, code at {sha[:12]})")
