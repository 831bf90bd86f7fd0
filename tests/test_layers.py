"""The import graph of helpers/: the toolkit never imports the course layer (course, checks, selfcheck,
the labs' workloads) above it, and the toolkit imports without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "helpers"
#: The course layer sits on top of the toolkit (the workloads are the labs' training loops).
COURSE = ("helpers.course", "helpers.checks", "helpers.selfcheck", "helpers.workloads")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of helpers this file imports at module level or in functions (relative imports resolved)."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("helpers"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("helpers"))
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    return {m: {t for t in _imports(p) if t in files and t != m} for m, p in files.items()}


def _in(mod: str, layer: tuple[str, ...]) -> bool:
    return any(mod == x or mod.startswith(x + ".") for x in layer)


def test_toolkit_never_imports_the_course_layer():
    up = sorted((m, t) for m, ts in _graph().items() for t in ts
                if not _in(m, COURSE) and _in(t, COURSE) and m != "helpers.cli")
    # helpers.cli may start the self-check, but only from inside its command (checked below)
    assert not up, up


def test_cli_reaches_the_course_layer_only_inside_a_command():
    tree = ast.parse((PKG / "cli.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {(getattr(n, "module", None) or "") + ":" + ",".join(a.name for a in n.names) for n in top}
    assert not any("selfcheck" in x or "checks" in x or "course" in x for x in names), names


def test_toolkit_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import helpers, helpers.cli, helpers.diagnosis, helpers.patterns, helpers.render, helpers.export, helpers.metrics\n"
            "import helpers.readers")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _module_graph() -> dict[str, set[str]]:
    """Module -> the helpers modules it imports, where ``from pkg import sub`` names the submodule (not the package)."""
    files = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
                subs = {f"{target}.{a.name}" for a in node.names} & files.keys()
                out |= subs or ({target} & files.keys())
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names} & files.keys()
        graph[mod] = out - {mod}
    return graph


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_course_and_checks_import_in_one_direction():
    # checks build on the course module (recordings, the track); the course never imports a check back,
    # not even inside a function (the one-line error display takes CheckFailed from helpers.errors)
    graph = _module_graph()
    assert "helpers.course" in _reaches(graph, "helpers.checks.lab05")
    below = _reaches(graph, "helpers.course")
    assert not any(_in(mod, ("helpers.checks", "helpers.selfcheck")) for mod in below), sorted(below)
    assert "helpers.course" not in below  # no cycle through it



def _a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path that ends where it starts, or [] when there is none."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path, todo = [root], [iter(sorted(graph[root]))]
        while path:
            nxt = next(todo[-1], None)
            if nxt is None:  # every import of path[-1] explored: no cycle runs through it
                done.add(path.pop())
                todo.pop()
            elif nxt in path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                todo.append(iter(sorted(graph.get(nxt, ()))))
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_has_no_cycle():
    # every import statement in helpers/, those inside functions too: a cycle hidden in a function is still one
    graph = _module_graph()
    assert "helpers.lanes" in graph["helpers.explore"] and "helpers.metrics.steady" in graph["helpers.metrics.report"]
    cycle = _a_cycle(graph)
    assert not cycle, " -> ".join(cycle)
