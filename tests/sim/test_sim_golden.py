"""The simulator writes the same bytes as before its speed-ups (issue 16), case by case, and
the same bytes on any processor (issue 34).

The cases and the fixture live in `sim_golden.py` (run it with --check for all of them at
once, or --write after a deliberate change of behaviour). The quick test takes one case per
base config and variant; the slow one takes every case. The other-processor tests run the
cases again in a subprocess that numpy and OpenBLAS treat as an older processor: every
optional CPU feature numpy dispatches on switched off (so no AVX-512 or SVML kernel, as on an
AMD Zen 3), and OpenBLAS on another kernel. The fixture must hold there too.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import sim_golden

EXPECTED = json.loads(sim_golden.FIXTURE.read_text())["cases"]
CASES = sim_golden.cases()
# One policy and seed per group (base config or variant), the groups' first cases.
QUICK = sorted({name.split("/")[0]: name for name in reversed(CASES)}.values())


def test_fixture_covers_every_case() -> None:
    assert sorted(EXPECTED) == sorted(CASES)


@pytest.mark.parametrize("name", QUICK)
def test_golden_quick(name: str) -> None:
    base, sets = CASES[name]
    assert sim_golden.run_case(base, sets) == EXPECTED[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CASES) - set(QUICK)))
def test_golden_all(name: str) -> None:
    base, sets = CASES[name]
    assert sim_golden.run_case(base, sets) == EXPECTED[name]


def _host_optional_features() -> list[str]:
    """numpy's dispatchable CPU features that this host has (everything above the baseline)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


_OTHER_PROCESSOR = """
import json, sys
from numpy._core._multiarray_umath import __cpu_features__
import sim_golden
cases = sim_golden.cases()
digests = {name: sim_golden.run_case(*cases[name]) for name in sys.argv[1:]}
print(json.dumps({"features_on": [f for f, on in __cpu_features__.items() if on],
                  "digests": digests}))
"""


def _run_as_other_processor(names: list[str]) -> dict[str, dict[str, str]]:
    off = _host_optional_features()
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(off)}
    if platform.machine() in ("x86_64", "AMD64"):
        # Sandy Bridge: the oldest AVX kernel, unlike the Haswell / SkylakeX / Zen kernels
        # OpenBLAS picks on the machines this project runs on.
        env["OPENBLAS_CORETYPE"] = "Sandybridge"
    out = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESSOR, *names],
        env=env,
        cwd=Path(sim_golden.__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # The switch took effect: none of the features is on in the subprocess.
    assert not set(off) & set(got["features_on"]), got["features_on"]
    return got["digests"]


def test_golden_quick_on_another_processor() -> None:
    """The quick cases give the fixture's digests with the host's SIMD kernels switched off."""
    got = _run_as_other_processor(QUICK)
    assert {name: got[name] for name in QUICK} == {name: EXPECTED[name] for name in QUICK}


@pytest.mark.slow
def test_golden_all_on_another_processor() -> None:
    names = sorted(CASES)
    assert _run_as_other_processor(names) == {name: EXPECTED[name] for name in names}


def test_no_simd_transcendentals_where_records_are_made() -> None:
    """The modules that make simulated records and fitted coefficients call no numpy
    transcendental ufunc (agentic_kvc.portable says why); `math` does the same job."""
    import re

    src = Path(sim_golden.REPO) / "src" / "agentic_kvc"
    banned = re.compile(
        r"\bnp\.(exp|exp2|expm1|log|log2|log10|log1p|power|float_power|"
        r"sin|cos|tan|arcsin|arccos|arctan|arctan2|sinh|cosh|tanh|cbrt)\("
    )
    folders = ["sim", "workload", "policy", "cache", "calibrate", "profiles"]
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for folder in folders
        for path in sorted((src / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if banned.search(line)
    ]
    assert not found, "numpy transcendentals where records are made:\n" + "\n".join(found)
