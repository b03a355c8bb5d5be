"""Which processor a run ran on (issue 34): parsed from /proc/cpuinfo, compared with the
`cpu-tiny` profile's, and said in study 7 with the recalibration command when they differ."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from agentic_kvc import runs
from agentic_kvc.analysis.studies.real import RECALIBRATE, processor_note
from agentic_kvc.processor import parse_cpuinfo, processor_info, processor_label, same_processor

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw amx_bf16 amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
"""
AMD = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse4_2 avx avx2 fma
"""
ARM = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes sve sve2 bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd4f
"""


def test_parse_x86_and_arm() -> None:
    intel, amd, arm = parse_cpuinfo(INTEL), parse_cpuinfo(AMD), parse_cpuinfo(ARM)
    assert (intel["vendor"], intel["family"], intel["model"]) == ("GenuineIntel", "6", "143")
    assert intel["vector_extensions"] == [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "amx_bf16",
        "amx_int8",
    ]
    assert amd["vector_extensions"] == ["sse4_2", "avx", "avx2", "fma"]
    assert arm["vendor"] == "0x41" and arm["vector_extensions"] == ["asimd", "sve", "sve2", "bf16"]
    assert "AMX + AVX-512" in processor_label(intel)
    assert processor_label(amd).endswith("[AVX2]") and "AuthenticAMD" in processor_label(amd)
    assert "[SVE]" in processor_label(arm)


def test_same_processor() -> None:
    intel, amd = parse_cpuinfo(INTEL), parse_cpuinfo(AMD)
    assert same_processor(intel, dict(intel)) is True
    assert same_processor(intel, amd) is False
    fewer = {**intel, "vector_extensions": ["avx", "avx2"]}  # same ids, AVX-512 hidden by a VM
    assert same_processor(intel, fewer) is False
    # Older records kept only the model name.
    assert same_processor({"model_name": "AMD EPYC"}, {"model_name": "AMD EPYC"}) is True
    assert same_processor({"model_name": "AMD EPYC"}, intel) is False
    assert same_processor(None, intel) is None and same_processor({}, intel) is None


def _profile(tmp_path: Path, machine: dict) -> Path:
    path = tmp_path / "cpu-tiny.json"
    path.write_text(json.dumps({"date": "2026-11-24T23:07:13Z", "machine": machine}))
    return path


def test_study_note_says_when_the_profile_is_from_another_processor(tmp_path: Path) -> None:
    intel, amd = parse_cpuinfo(INTEL), parse_cpuinfo(AMD)
    runs = [{"hardware": {"processor": amd}}, {"hardware": {"processor": amd}}]
    other = processor_note(runs, _profile(tmp_path, {"processor": intel}))
    assert "AMD EPYC 7B13" in other and "Platinum 8480+" in other
    assert "differs" in other and RECALIBRATE in other
    same = processor_note(runs, _profile(tmp_path, {"processor": amd}))
    assert same.endswith("the same kind.") and RECALIBRATE not in same
    # A profile that recorded only a model name that matches nothing is not called the same.
    unknown = processor_note(runs, _profile(tmp_path, {"cpu": "Intel(R) Xeon(R) Processor"}))
    assert RECALIBRATE in unknown


# Two other Arm layouts: a 32-bit Raspberry Pi names its model on each processor, and kernels
# before 3.8 put a "Processor" line above the blocks instead.
ARM_PI = """processor\t: 0
model name\t: ARMv7 Processor rev 4 (v7l)
BogoMIPS\t: 38.40
Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm
CPU implementer\t: 0x41

Hardware\t: BCM2835
"""
ARM_OLD = """Processor\t: ARMv7 Processor rev 0 (v7l)
processor\t: 0
BogoMIPS\t: 1581.05
Features\t: swp half thumb fastmult vfp edsp neon vfpv3 tls
CPU implementer\t: 0x41
CPU architecture: 7
CPU part\t: 0xc09
"""


@pytest.mark.parametrize(
    ("text", "cpu", "timing_cpu", "model_name"),
    [
        (INTEL, *["Intel(R) Xeon(R) Platinum 8480+"] * 3),
        (AMD, *["AMD EPYC 7B13"] * 3),
        # No "model name" line: the run's `cpu` is `platform`'s guess (timings record ""),
        # while the processor's name falls back to Arm's own "Processor" line where it has one.
        (ARM, "aarch64", "", None),
        (ARM_PI, *["ARMv7 Processor rev 4 (v7l)"] * 3),
        (ARM_OLD, "aarch64", "", "ARMv7 Processor rev 0 (v7l)"),
        (None, "aarch64", "", None),  # no /proc/cpuinfo at all
    ],
    ids=["intel", "amd", "arm", "arm-pi", "arm-old", "none"],
)
def test_cpu_and_processor_name_from_one_cpuinfo(
    monkeypatch: pytest.MonkeyPatch,
    text: str | None,
    cpu: str,
    timing_cpu: str,
    model_name: str | None,
) -> None:
    """A run's `cpu` and its processor's `model_name` both come from /proc/cpuinfo: each
    reader's answer on x86 and Arm texts (pinned when the two readers became one)."""
    read_text = Path.read_text

    def fake_read_text(self: Path, *args: object, **kw: object) -> str:
        if str(self) == "/proc/cpuinfo":
            if text is None:
                raise FileNotFoundError(self)
            return text
        return read_text(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(runs, "visible_gpus", lambda: [])
    assert runs.hardware_info()["cpu"] == cpu
    assert runs.timing_conditions()["cpu"] == timing_cpu
    info = processor_info()
    assert info["model_name"] == model_name
    assert runs.hardware_info()["processor"] == info == runs.timing_conditions()["processor"]
    assert info["label"].startswith(model_name or "aarch64")


def _probed(processor: dict, python_ms: float, memory_ms: float | None = None) -> dict:
    probe = {"python_ms": {"best": python_ms, "median": python_ms + 1}}
    if memory_ms is not None:
        probe["memory_ms"] = {"best": memory_ms, "median": memory_ms + 1}
    return {
        "hardware": {"processor": processor},
        "backend_info": {"host_load": {"speed_start": probe}},
    }


def test_study_note_compares_the_machines_speed_with_the_profiles(tmp_path: Path) -> None:
    """Same processor kind, a slower VM: the note says by how much, per kernel, from the two
    probes; a kernel one side did not record is left out of the ratio."""
    amd = parse_cpuinfo(AMD)
    runs = [_probed(amd, 13.0, 8.0), _probed(amd, 15.0, 9.0), _probed(amd, 20.0, 12.0)]
    speed = {"python_ms": {"best": 10.0, "median": 10.5}}
    fitted = {"processor": amd, "speed": speed}
    note = processor_note(runs, _profile(tmp_path, fitted))
    assert "the same kind." in note
    assert "median of 3" in note and "interpreter 15.0 ms" in note and "memory 9.0 ms" in note
    assert "interpreter 10.0 ms (1.50x as slow now)" in note
    assert "memory 9.0 ms (" not in note  # the profile has no memory kernel
    speed["memory_ms"] = {"best": 4.5, "median": 5.0}
    both = processor_note(runs, _profile(tmp_path, fitted))
    assert "memory 4.5 ms (2.00x as slow now)" in both
    # A profile fitted before probes: the runs' probe is said, the ratio is not known.
    old = processor_note(runs, _profile(tmp_path, {"processor": amd}))
    assert "interpreter 15.0 ms" in old and "not known" in old and "as slow" not in old
    # Runs without probes (older manifests): nothing is said about speed.
    bare = processor_note([{"hardware": {"processor": amd}}], _profile(tmp_path, fitted))
    assert bare.endswith("the same kind.")


def test_machine_cells_show_both_kernels_and_what_is_missing() -> None:
    from agentic_kvc.analysis.studies.real import host_load, machine_cells

    amd = parse_cpuinfo(AMD)
    loads = [host_load(_probed(amd, 14.2, 8.1)), host_load(_probed(amd, 14.9, 7.7))]
    assert machine_cells(loads)[2] == "14.2-14.9 / 7.7-8.1"
    older = [host_load(_probed(amd, 14.2))]  # before the memory kernel
    assert machine_cells(older)[2] == "14.2-14.2 / -"
    assert machine_cells([host_load({})]) == ["-", "-", "-"]
