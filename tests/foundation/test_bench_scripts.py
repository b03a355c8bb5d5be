"""agentic_kvc.bench_scripts: a benchmark loaded by name is the module its siblings import."""

from __future__ import annotations

import sys
from pathlib import Path

from agentic_kvc.bench_scripts import BENCHMARKS, load_benchmark


def test_a_script_and_the_sibling_it_imports_share_one_module() -> None:
    rb = load_benchmark("policy_robustness")
    assert Path(rb.__file__).resolve() == BENCHMARKS / "policy_robustness.py"
    ms = load_benchmark("policy_misspec")  # does `import policy_robustness as rb` itself
    assert ms.rb is rb and load_benchmark("policy_robustness") is rb


def test_a_folder_of_its_own_is_searched_first(tmp_path: Path) -> None:
    name = "akvc_bench_scripts_probe"
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    try:
        mod = load_benchmark(name, tmp_path)
        assert mod.VALUE == 7 and Path(mod.__file__).parent == tmp_path
        assert sys.path[0] == str(tmp_path)
        load_benchmark(name, tmp_path)
        assert sys.path.count(str(tmp_path)) == 1  # added once, however often it is asked
    finally:
        sys.modules.pop(name, None)
        sys.path.remove(str(tmp_path))
