"""The package's imports go one way: no cycles, and no imports of package modules hidden in functions.

Every module is parsed with ``ast`` (nothing is imported), so the graph also holds the
imports that only run when a function is called.
"""
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import paper_repro

PACKAGE_DIR = Path(paper_repro.__file__).parent


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under ``package_dir`` (packages by their __init__)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module name of a ``from ... import`` (relative or absolute)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _function_level(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside a function body."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def import_graph(package_dir: Path, package: str) -> dict[str, list[tuple[str, int, bool]]]:
    """``{module: [(imported module, line, inside a function), ...]}`` for imports of ``package``
    modules. Importing ``a.b.c`` also runs the packages ``a.b`` (unless the importer is inside
    it), so they count as imported too."""
    modules = module_names(package_dir, package)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        in_functions = _function_level(tree)
        is_package = path.name == "__init__.py"
        edges = []
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, name, is_package)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target != package and not target.startswith(package + "."):
                    continue
                while target not in modules and "." in target:  # `import pkg.mod.attr` style
                    target = target.rsplit(".", 1)[0]
                parts = target.split(".")
                for k in range(2, len(parts) + 1):  # the target and the packages it runs first
                    dep = ".".join(parts[:k])
                    own_package = name == dep or name.startswith(dep + ".")
                    if dep in modules and not own_package:
                        edges.append((dep, node.lineno, id(node) in in_functions))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for dep, _, _ in graph.get(node, ()):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph(PACKAGE_DIR, "paper_repro"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_function_level_imports_of_the_package():
    graph = import_graph(PACKAGE_DIR, "paper_repro")
    modules = module_names(PACKAGE_DIR, "paper_repro")
    hidden = sorted({f"{modules[m].relative_to(PACKAGE_DIR.parent)}:{line} imports {dep}"
                     for m, edges in graph.items() for dep, line, in_function in edges if in_function})
    assert not hidden, "imports of package modules inside functions:\n" + "\n".join(hidden)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_checker_finds_a_cycle_hidden_in_a_function(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from .sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "def f():\n    from .. import a\n    return a\n",
        "c.py": "import pkg.a\n",
    })
    graph = import_graph(root, "pkg")
    assert ("pkg.sub.b", 1, False) in graph["pkg.a"]
    assert ("pkg.sub", 1, False) in graph["pkg.a"]  # the package runs first
    assert graph["pkg.sub.b"] == [("pkg.a", 2, True)]
    assert graph["pkg.c"] == [("pkg.a", 1, False)]
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"pkg.a", "pkg.sub.b"}


def test_checker_accepts_a_package_importing_its_own_modules(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "p/__init__.py": "from .x import f\nfrom . import y\n",
        "p/x.py": "from .y import g\n\ndef f():\n    return g()\n",
        "p/y.py": "import math\n\ndef g():\n    return math.pi\n",
    })
    graph = import_graph(root, "pkg")
    assert sorted(graph["pkg.p"]) == [("pkg.p.x", 1, False), ("pkg.p.y", 2, False)]
    assert graph["pkg.p.x"] == [("pkg.p.y", 1, False)]
    assert find_cycle(graph) is None


@pytest.mark.parametrize("module", ["paper_repro.analysis", "paper_repro.cli", "paper_repro.distributed.run"])
def test_table_and_command_modules_do_not_load_plotting(module):
    """Checked in a fresh interpreter: these modules must not pull in matplotlib or the probes."""
    code = (f"import sys, {module}; bad = [m for m in ('matplotlib', 'seaborn', 'paper_repro.plots', "
            "'paper_repro.probes') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
