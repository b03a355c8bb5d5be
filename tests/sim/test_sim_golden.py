"""The simulator writes the same bytes as before its speed-ups (issue 16), case by case.

The cases and the fixture live in `sim_golden.py` (run it with --check for all of them at
once, or --write after a deliberate change of behaviour). The quick test takes one case per
base config and variant; the slow one takes every case.
"""

from __future__ import annotations

import json

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
