"""The package's layering (../shared/ARCHITECTURE.md): `profiles/` (the engine cost model) sits
below both `policy/` and `sim/`, neither `policy/` nor `cache/` reaches up into `sim/`, no two
modules import each other, directly or round a loop, and neither do two packages.

Imports are read from the source with `ast`, so a lazy import inside a function counts as much
as one at the top of a module: laziness postpones a dependency, it does not remove it. Imports
under `if TYPE_CHECKING:` are type annotations only; they count for the layering rules (a type
from `sim/` in `policy/` still couples them) but not for cycles (they never run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "agentic_kvc"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (the deepest name that is a module of the package)
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`


def package_modules(root: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` under `root`."""
    out: dict[str, Path] = {}
    for f in sorted((root / package).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of a package module in `name` (at any depth: module level, functions,
    classes), resolved to the module it loads; relative imports are resolved too."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[Import] = []

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            if "." not in dotted:
                return None
            dotted = dotted.rsplit(".", 1)[0]
        return dotted or None

    def add(dotted: str, line: int, typing_only: bool) -> None:
        target = resolve(dotted)
        if target is not None and target != name:
            found.append(Import(name, target, line, typing_only))

    def visit(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, True)
                for stmt in child.orelse:
                    visit_stmt(stmt, typing_only)
            else:
                visit_stmt(child, typing_only)

    def visit_stmt(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, typing_only)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from pkg import mod` loads pkg.mod; `from mod import name` loads mod.
                full = f"{base}.{alias.name}"
                add(full if full in modules else base, node.lineno, typing_only)
        else:
            visit(node, typing_only)

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return found


def all_imports(modules: dict[str, Path]) -> list[Import]:
    return [imp for name, path in modules.items() for imp in module_imports(name, path, modules)]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done (no cycle through it)
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := dfs(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := dfs(start)) is not None:
            return cycle
    return None


def _in(module: str, package: str) -> bool:
    full = f"{PACKAGE}.{package}"
    return module == full or module.startswith(full + ".")


def _violations(imports: list[Import], source: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{i.source} (line {i.line}) imports {i.target}"
        for i in imports
        if _in(i.source, source) and any(_in(i.target, f) for f in forbidden)
    ]


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports(package_modules())


def test_policy_does_not_import_sim(imports: list[Import]) -> None:
    """Routing policies run in the proxy too: the simulator is not theirs to import."""
    bad = _violations(imports, "policy", ("sim",))
    assert not bad, "\n".join(bad)


def test_router_caches_do_not_import_sim(imports: list[Import]) -> None:
    """The router's views of the engines' caches (`cache/`) run in the proxy too; a structure
    the simulated engine shares with them (the tier store) lives in `cache/`, not in `sim/`."""
    bad = _violations(imports, "cache", ("sim",))
    assert not bad, "\n".join(bad)


def test_profiles_import_neither_policy_nor_sim(imports: list[Import]) -> None:
    """The engine cost model sits below both of its users, and below the serving layer."""
    bad = _violations(imports, "profiles", ("policy", "sim", "serve"))
    assert not bad, "\n".join(bad)


def _package(module: str) -> str:
    """The top-level package (or module) of the package a module belongs to."""
    return ".".join(module.split(".")[:2])


def test_no_cycle_between_packages(imports: list[Import]) -> None:
    """The folders are layers: no two import each other, directly or round a loop, so each can
    be read knowing only what it imports. Command-line modules (`cli`, `*_cli`) are entry
    points that may reach any package and are left out."""
    edges: dict[str, set[str]] = {}
    for i in imports:
        a, b = _package(i.source), _package(i.target)
        if i.typing_only or a == b or i.source.rsplit(".", 1)[-1].endswith("cli"):
            continue
        edges.setdefault(a, set()).add(b)
    cycle = find_cycle(edges)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or [])


def test_no_import_cycle(imports: list[Import]) -> None:
    edges: dict[str, set[str]] = {}
    for i in imports:
        if not i.typing_only:
            edges.setdefault(i.source, set()).add(i.target)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The checker itself, on a package written for the purpose: it must see what it claims to.


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return package_modules(root, "pkg")


def test_checker_sees_lazy_relative_and_typing_imports(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/x.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.b import y\n"
                "def f():\n    from ..b import z\n"
            ),
            "pkg/b/__init__.py": "from pkg.b.y import Y\n",
            "pkg/b/y.py": "Y = 1\n",
            "pkg/b/z.py": "import os\nfrom . import y\n",
        },
    )
    got = {(i.source, i.target, i.typing_only) for i in all_imports(modules)}
    assert got == {
        ("pkg.a.x", "pkg.b.y", True),
        ("pkg.a.x", "pkg.b.z", False),
        ("pkg.b", "pkg.b.y", False),
        ("pkg.b.z", "pkg.b.y", False),
    }


def test_find_cycle_reports_the_loop_through_a_lazy_import(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/backend.py": "from pkg.fleet import F\n",
            "pkg/fleet.py": "from pkg.fit import g\n",
            "pkg/fit.py": "def g():\n    from pkg.backend import run\n",
            "pkg/leaf.py": "import pkg.fit\n",
        },
    )
    edges: dict[str, set[str]] = {}
    for i in all_imports(modules):
        edges.setdefault(i.source, set()).add(i.target)
    assert find_cycle(edges) == ["pkg.backend", "pkg.fleet", "pkg.fit", "pkg.backend"]
    edges["pkg.fit"].clear()
    assert find_cycle(edges) is None
