"""Which processor a real run ran on: vendor, model and the vector extensions that decide
how fast a CPU engine runs (issue 34).

The model name alone can be a hypervisor's "Intel(R) Xeon(R) Processor"; the family/model
numbers and the extensions (AVX2, AVX-512, AMX on x86; NEON/SVE on Arm) tell two machines
apart where it matters for vLLM's CPU kernels. Read from /proc/cpuinfo; elsewhere only what
`platform` knows.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

# The extensions worth naming, in the order they are shown: what the CPU engine's kernels
# (oneDNN, vLLM's CPU attention) and numpy dispatch on.
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
    "bf16",
)


CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's `key: value` fields of a /proc/cpuinfo text (all are alike here);
    a line above the first block, as older Arm kernels write, counts as part of it."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def read_cpuinfo(cpuinfo: Path = CPUINFO) -> dict[str, str] | None:
    """`cpuinfo_fields` of this machine's /proc/cpuinfo; None where there is none (not Linux).

    The one place that reads the file: a run's `cpu` (`cpu_model`) and its `processor`
    (`processor_info`) both come from here."""
    try:
        return cpuinfo_fields(cpuinfo.read_text())
    except OSError:
        return None


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The "model name" line of /proc/cpuinfo, as a run's `cpu` records it: None where it has
    none (aarch64; no file). Unlike `parse_cpuinfo`'s `model_name`, no fall back to Arm's
    "Processor" line: recorded `cpu` values stay what they were."""
    fields = read_cpuinfo(cpuinfo)
    return None if fields is None else fields.get("model name")


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The first processor's fields of a /proc/cpuinfo text (x86 or Arm)."""
    return _processor_fields(cpuinfo_fields(text))


def _processor_fields(fields: dict[str, str]) -> dict[str, Any]:
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {
        "model_name": fields.get("model name") or fields.get("Processor") or None,
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer") or None,
        "family": fields.get("cpu family") or fields.get("CPU architecture") or None,
        "model": fields.get("model") or fields.get("CPU part") or None,
        "stepping": fields.get("stepping") or fields.get("CPU revision") or None,
        "vector_extensions": [f for f in VECTOR_FLAGS if f in flags],
    }


def processor_info(cpuinfo: Path = CPUINFO) -> dict[str, Any]:
    """This machine's processor: `parse_cpuinfo` plus the architecture and a short label."""
    fields = read_cpuinfo(cpuinfo)
    if fields is not None:
        info = _processor_fields(fields)
    else:
        info = {"model_name": platform.processor() or None, "vector_extensions": []}
    info["arch"] = platform.machine()
    info["label"] = processor_label(info)
    return info


def processor_label(info: dict[str, Any]) -> str:
    """One line for a table: name, family/model numbers, and the widest vector class."""
    name = info.get("model_name") or info.get("arch") or "unknown processor"
    ids = [f"{k} {info[k]}" for k in ("family", "model") if info.get(k)]
    ext = set(info.get("vector_extensions") or [])
    widest = next(
        (
            label
            for flag, label in (
                ("amx_bf16", "AMX"),
                ("avx512f", "AVX-512"),
                ("avx2", "AVX2"),
                ("sve", "SVE"),
                ("asimd", "NEON"),
                ("avx", "AVX"),
            )
            if flag in ext
        ),
        None,
    )
    parts = [name]
    if info.get("vendor"):
        parts.append(f"({info['vendor']}{', ' + ', '.join(ids) if ids else ''})")
    if widest:
        parts.append(f"[{widest}{' + AVX-512' if widest == 'AMX' else ''}]")
    return " ".join(parts)


def same_processor(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool | None:
    """Whether two recorded processors are the same kind (None: not enough recorded).

    Compared on vendor, family, model and vector extensions where both have them, else on
    the model name only (older records kept just that).
    """
    if not a or not b:
        return None
    keys = [k for k in ("vendor", "family", "model") if a.get(k) and b.get(k)]
    if keys:
        same = all(a[k] == b[k] for k in keys)
        if a.get("vector_extensions") and b.get("vector_extensions"):
            same = same and a["vector_extensions"] == b["vector_extensions"]
        return same
    if a.get("model_name") and b.get("model_name"):
        return a["model_name"] == b["model_name"]
    return None
