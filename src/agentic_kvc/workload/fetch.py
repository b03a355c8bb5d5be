"""Public traces by name: where they come from, their sha256, and fetching them.

A trace is taken from a local folder when one holds it (the `AKVC_TRACES_DIR` environment
variable, a configured folder, or `--local-dir`), else downloaded from its upstream URL; either
way the bytes must match the recorded sha256 before the file appears at its destination
(written atomically). Public trace files are never committed to the repository: the Snakemake
rule `fetch_trace` (workflow/rules/workloads.smk) puts them under results/traces/.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.io import sha256_file


@dataclass(frozen=True, slots=True)
class PublicTrace:
    file_name: str  # name upstream and in a local traces folder
    sha256: str
    url: str | None  # None: no stable upstream URL known; a local copy is needed
    credit: str
    # In `snakemake traces` (the default set); large optional traces are fetched by name.
    default: bool = True


PUBLIC_TRACES: dict[str, PublicTrace] = {
    "mooncake_conversation": PublicTrace(
        "mooncake_conversation_trace.jsonl",
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
        "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/"
        "FAST25-release/traces/conversation_trace.jsonl",
        "Mooncake (Qin et al., FAST'25), kvcache-ai/Mooncake, Apache-2.0",
    ),
    "tracelab_multi_session_sample": PublicTrace(
        "tracelab_multi_session_sample.csv",
        "8afdf8d3ae742aa73a17ab93a4f11edafa6076fdfb47d0fb96d2c3defc6de8ab",
        None,
        "TraceLab replay example, uw-syfi/TraceLab, CC-BY-4.0",
    ),
    "tracelab_round_trace_sample": PublicTrace(
        "tracelab_round_trace_sample.jsonl",
        "314c49483148fe68e230a683f739e3e6e68d478948ecf342739596f30af36b57",
        None,
        "TraceLab sanitized sessions, uw-syfi/TraceLab, CC-BY-4.0",
    ),
    # 132 MB, stored with Git LFS upstream: its sha256 is the LFS object id, and the URL is
    # pinned to the commit that added it.
    "bailian_qwen_coder": PublicTrace(
        "qwen_coder_blksz_16.jsonl",
        "3d74974cebb7bccb69b1ca6ea210a44d9a3033443c0271ed015327284dea1aff",
        "https://media.githubusercontent.com/media/alibaba-edu/qwen-bailian-usagetraces-anon/"
        "0b4273a1d8a83935b9d9356e78f95c31f2ac64cf/qwen_coder_blksz_16.jsonl",
        "Alibaba Bailian (Wang et al., ATC'25), alibaba-edu/qwen-bailian-usagetraces-anon, "
        "Apache-2.0",
        default=False,
    ),
}


class TraceFetchError(RuntimeError):
    pass


def local_dirs(extra: list[str | Path] | None = None) -> list[Path]:
    dirs = [Path(d) for d in (extra or []) if d]
    env = os.environ.get("AKVC_TRACES_DIR")
    if env:
        dirs.extend(Path(d) for d in env.split(os.pathsep) if d)
    return dirs


def fetch_trace(name: str, out: Path, local: list[str | Path] | None = None) -> str:
    """Place trace `name` at `out` (sha256-checked); returns where it came from."""
    if name not in PUBLIC_TRACES:
        raise TraceFetchError(f"unknown trace {name!r}; known: {', '.join(PUBLIC_TRACES)}")
    spec = PUBLIC_TRACES[name]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        source = None
        for d in local_dirs(local):
            cand = d / spec.file_name
            if cand.is_file():
                shutil.copyfile(cand, tmp)
                source = str(cand)
                break
        if source is None:
            if spec.url is None:
                raise TraceFetchError(
                    f"trace {name!r} has no upstream URL; put {spec.file_name} in a folder named "
                    "by AKVC_TRACES_DIR or the workflow's traces_dir"
                )
            with urllib.request.urlopen(spec.url, timeout=60) as resp, tmp.open("wb") as fh:
                shutil.copyfileobj(resp, fh)
            source = spec.url
        got = sha256_file(tmp)
        if got != spec.sha256:
            raise TraceFetchError(
                f"trace {name!r} from {source}: sha256 {got} does not match the recorded "
                f"{spec.sha256}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a trace is public data
        os.replace(tmp, out)
        return source
    finally:
        tmp.unlink(missing_ok=True)
