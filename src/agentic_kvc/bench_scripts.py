"""The checkout's benchmark scripts (benchmarks/*.py) as modules, for code that reads their plan.

The benchmarks folder is not a package: the scripts import each other by bare name with the
folder on `sys.path` (policy_misspec, policy_split and policy_moves do `import policy_robustness`).
Whoever else needs a script's tables (the sweep rules in workflow/, the batch job
workflow/scripts/sweep_batch.py, tests) loads it the same way, through `load_benchmark`, so a
script and the siblings it imports share one module object however either was reached first.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"  # src layout: the checkout's


def load_benchmark(name: str, folder: Path | str | None = None) -> ModuleType:
    """benchmarks/<name>.py as the module `name`: imported by name with `folder` (default: this
    checkout's benchmarks/; a pipeline copy passes its own) first on `sys.path`. A module of
    that name already imported is returned as it is, as Python's import does."""
    where = str(Path(folder) if folder is not None else BENCHMARKS)
    if where not in sys.path:
        sys.path.insert(0, where)
    return importlib.import_module(name)
