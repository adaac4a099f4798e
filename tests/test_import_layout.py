"""The packages' dependency direction, and no import cycles.

``rightsizer_core`` imports nothing of ours; the right-sizing engine (``rightsizing``) imports only
the core; the exporter imports the core and the engine; the adapter imports only the core; neither
program imports the other. Every import counts: module-level, inside functions, and under
``TYPE_CHECKING`` (a type-only import is still a dependency a reader must follow, and the cycle it
closes is one a refactoring can turn into a real one).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rightsizer_core", "rightsizing", "exporter", "adapter")
# What each package may import, besides itself. Anything else of this repository (the other
# packages, tests, bench, scripts) is forbidden.
ALLOWED = {
    "rightsizer_core": {"rightsizer_core"},
    "rightsizing": {"rightsizer_core", "rightsizing"},
    "exporter": {"rightsizer_core", "rightsizing", "exporter"},
    "adapter": {"rightsizer_core", "adapter"},
}
OURS = {*PACKAGES, "tests", "bench", "scripts", "dashboards", "deploy"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module it imports (a submodule when ``from pkg import submodule``)
    line: int

    def __str__(self) -> str:
        return f"{self.module} imports {self.target} (line {self.line})"


def module_files() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> Iterator[Import]:
    """Every import in the file, wherever it is (``ast.walk`` reaches function bodies too)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield Import(module, sub if sub in known else source, node.lineno)


def all_imports() -> list[Import]:
    files = module_files()
    return [i for m, p in files.items() for i in imports_of(m, p, set(files))]


def forbidden(imports: list[Import]) -> list[Import]:
    """The imports against ``ALLOWED``, each once (``from x import a, b`` is one import of ``x``)."""
    bad = (
        i
        for i in imports
        if (top := i.target.split(".")[0]) in OURS and top not in ALLOWED[i.module.split(".")[0]]
    )
    return list(dict.fromkeys(bad))


def cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """One cycle per strongly connected component of the module graph (Tarjan), as a path."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for i in imports:
        if i.target in modules:
            edges[i.module].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                components.append(component)

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return [_path_through(sorted(c)[0], c, edges) for c in components]


def _path_through(start: str, component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest import path from ``start`` back to itself within the component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        step = []
        for v in frontier:
            for w in sorted(edges[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in previous:
                    previous[w] = v
                    step.append(w)
        frontier = step
    raise AssertionError(f"no cycle through {start}")


def test_every_package_imports_only_what_it_may() -> None:
    imports = all_imports()
    assert len(module_files()) > 150  # the walk found the packages' modules
    bad = forbidden(imports)
    assert bad == [], "forbidden imports:\n" + "\n".join(map(str, bad))


def test_no_import_cycles() -> None:
    found = cycles(all_imports(), set(module_files()))
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_checker_names_a_forbidden_import_and_a_cycle() -> None:
    """The checks themselves: a made-up module graph with one wrong direction and one cycle."""
    made_up = [
        Import("adapter.cli", "exporter.config", 7),
        Import("rightsizing.verdicts", "rightsizer_core.settings", 3),
        Import("exporter.a", "exporter.b", 1),
        Import("exporter.b", "exporter.c", 1),
        Import("exporter.c", "exporter.a", 9),
    ]
    assert [str(i) for i in forbidden(made_up)] == ["adapter.cli imports exporter.config (line 7)"]
    modules = {"exporter.a", "exporter.b", "exporter.c", "adapter.cli", "rightsizing.verdicts"}
    assert cycles(made_up, modules) == [["exporter.a", "exporter.b", "exporter.c", "exporter.a"]]


BENCH = ROOT / "bench"


def bench_imports() -> list[Import]:
    """The imports between benchmarks: each script has ``bench/`` on its ``sys.path`` and imports
    another by its bare name (``from common import wrk``). ``exporter`` and ``adapter`` name the
    packages there (each script puts the repository first), not ``bench/exporter.py``."""
    names = {p.stem for p in BENCH.glob("*.py")} - set(PACKAGES)
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module]
            else:
                continue
            found += [Import(f"bench.{path.stem}", f"bench.{t}", node.lineno) for t in targets if t in names]
    return found


def test_no_import_cycles_between_benchmarks() -> None:
    imports = bench_imports()
    assert ("bench.mig", "bench.common") in {(i.module, i.target) for i in imports}  # the walk found them
    found = cycles(imports, {f"bench.{p.stem}" for p in BENCH.glob("*.py")})
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_benchmark_is_named_like_a_test_helper() -> None:
    """The benchmarks put ``tests/`` on ``sys.path`` for the test servers: a benchmark named like a
    helper there is that helper when another benchmark imports it by name, and the import graph a
    reader (or the check above) follows is not the one Python does."""
    shared = {p.stem for p in BENCH.glob("*.py")} & {p.stem for p in (ROOT / "tests").glob("*.py")}
    assert shared == set()


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    return done.stdout.split()


def test_engine_loads_without_the_exporter_or_a_server() -> None:
    loaded = _loaded_after("import rightsizing.verdicts, rightsizing.recommend, rightsizing.planner")
    assert "rightsizing.verdicts" in loaded
    assert [m for m in loaded if m.split(".")[0] in {"exporter", "adapter", "aiohttp"}] == []


def test_adapter_loads_without_the_exporter() -> None:
    loaded = _loaded_after("import adapter.cli")
    assert "adapter.cli" in loaded
    assert [m for m in loaded if m.split(".")[0] == "exporter"] == []
