"""The architecture holds: imports under svmsim/ run downward (no cycle, lazy imports included; no floor imports
one it must not know), and families are imported only when used."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "svmsim"

#: (importer prefix, imported prefix, why): module-name prefixes that must never import each other
NEVER = [
    ("svmsim.core", "svmsim.comm", "foundations import nothing of svmsim above them"),
    ("svmsim.numerics", "svmsim.comm", "foundations import nothing of svmsim above them"),
    ("svmsim.comm", "svmsim.schedule", "the meter sits below the schedulers"),
    ("svmsim.comm", "svmsim.engine", "the meter sits below the engines"),
    ("svmsim.algorithms", "svmsim.schedule", "an algorithm knows no scheduler"),
    ("svmsim.algorithms", "svmsim.engine", "an algorithm knows no transport"),
    ("svmsim.schedule", "svmsim.algorithms", "a scheduler knows no algorithm"),
    ("svmsim.engine", "svmsim.algorithms", "an engine knows no algorithm"),
    ("svmsim.engine", "svmsim.runner", "an engine knows no runner"),
    ("svmsim.schedule", "svmsim.runner", "a scheduler knows no runner"),
    ("svmsim.faults", "svmsim.schedule", "faults sit below the schedulers"),
    ("svmsim.data", "svmsim.algorithms", "data knows no algorithm"),
    ("svmsim", "svmsim.conformance", "the conformance checks are a top floor: tests, `svmsim check` and the public "
                                     "API reach them"),
]
#: importers a NEVER rule does not apply to: (importer, imported prefix) -> why
ALLOWED = {("svmsim.cli", "svmsim.conformance"): "the command `svmsim check` runs the conformance suite",
           ("svmsim.warmup", "svmsim.conformance"): "`svmsim warmup` runs the conformance suite's small runs",
           ("svmsim.api", "svmsim.conformance"): "the public API hands the suite to plugin authors (on first use)"}



def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the svmsim modules it imports anywhere in its body (a package's own submodules excluded)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != m and t != "svmsim" and not m.startswith(t + "."):
                    edges[m].add(t)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_under_svmsim():
    cycles = _cycles(_imports(_modules()))
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_floor_imports_one_it_must_not_know():
    edges = _imports(_modules())
    broken = [f"{m} -> {t} ({why})" for m, ts in edges.items() for t in ts for a, b, why in NEVER
              if (m == a or m.startswith(a + ".")) and (t == b or t.startswith(b + ".")) and (m, b) not in ALLOWED]
    assert broken == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The check is not vacuous: two modules that import each other are reported."""
    edges = {"svmsim.a": {"svmsim.b"}, "svmsim.b": {"svmsim.a"}, "svmsim.c": set()}
    assert _cycles(edges) == [["svmsim.a", "svmsim.b"]]


@pytest.mark.parametrize("scenario, family, others", [
    ("quickstart.toml", "svmsim.algorithms.saddle", ("pushsum", "gadget", "hogwild", "pegasos")),
    ("pushsum_mixing.toml", "svmsim.algorithms.pushsum", ("saddle", "gadget", "hogwild", "gilbert")),
])
def test_validating_a_scenario_imports_only_its_family(scenario, family, others):
    code = ("import sys; from svmsim.config import validate_file; "
            f"validate_file({str(PACKAGE.parent / 'scenarios' / scenario)!r}); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('svmsim.algorithms.') "
            "or m in ('sklearn', 'ray'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert family in out
    assert not [m for m in out if m.split(".")[2] in others], out          # a family's package or its modules
    assert "ray" not in out and "sklearn" not in out, out      # start-up: validating starts no heavy stack


def test_every_family_is_discovered_and_lists_its_algorithms():
    from svmsim.algorithms import algorithm_names, load_all

    names = algorithm_names()
    assert {"saddle-svc", "saddle-dsvc", "pushsum", "gadget", "gilbert", "dgilbert", "hogwild", "pegasos"} <= set(names)
    assert sorted(load_all()) == names
