"""No module under svmsim/ reaches into another module's private names.

A name is private when it starts with an underscore and is not a dunder (``__version__``, ``__notes__``,
``__annotations__`` are public). The test walks the AST of every module under ``svmsim/`` and reports

- imports of a private name: ``from m import _x``, ``from ._m import x``, ``import m._x`` (anywhere in a module,
  function-local imports included; ``from __future__ import ...`` is not one). Importing a public name under a
  private alias (``from ..numerics.vectors import dot as _dot``) is fine: the alias is the importer's own name;
- attribute access ``obj._x`` (read, written or deleted) where ``obj`` is not ``self``, ``cls`` or ``super()``,
  and ``getattr``/``setattr``/``hasattr``/``delattr`` of a literal private name on such an object.

Two refinements:

- inside a class, ``other._x`` is allowed when that class itself declares ``_x`` (a method or class-level name, an
  entry of ``__slots__``, or ``self._x = ...`` / ``cls._x = ...`` in one of its methods): that is another instance
  of the same class, e.g. in ``__eq__`` or in a classmethod that builds an instance;
- `ALLOWED` lists attributes of third-party objects that are public API by convention although they start with an
  underscore (namedtuple's ``_replace``, ``sys._getframe``, ...), each with its reason.

Every other finding is fixed, or listed in `EXCEPTIONS` ("module:what" -> the reason). The test fails on a finding
that is not listed, and on a listed exception that no longer occurs, so the list cannot go stale.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "svmsim"

_NAMEDTUPLE = ("namedtuple's public API (typing.NamedTuple too): the leading underscore only keeps these names apart "
               "from the fields")

#: attributes of third-party objects that start with an underscore but are public by convention: a bare name is
#: allowed on any object, "module.name" only on that module
ALLOWED: dict[str, str] = {
    "_replace": _NAMEDTUPLE,
    "_asdict": _NAMEDTUPLE,
    "_fields": _NAMEDTUPLE,
    "_field_defaults": _NAMEDTUPLE,
    "_make": _NAMEDTUPLE,
    "sys._getframe": "documented in the `sys` module (CPython's way to reach a caller's frame and its globals)",
    "_getvalue": "numba's low-level extension API, as its documentation uses it: the LLVM value of a `cgutils` "
                 "structure proxy such as `context.make_array(ty)(context, builder)`",
}

#: "module:what" -> why the module still reaches into another module's private name
EXCEPTIONS: dict[str, str] = {
    "svmsim.topology:G._adj": "networkx's own adjacency dict of dicts, read without building the graph's views: "
                              "G.adj wraps every node's dict in a Python-level AtlasView, which makes this scan of "
                              "every edge about 2.5 times slower (2·10^5 nodes); read-only, and networkx keeps "
                              "G.adj as a view of exactly this dict",
}

_PROBES = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__") and len(name) > 4)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _own(value: ast.expr) -> bool:
    """`value` is ``self``, ``cls`` or ``super()``."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def _allowed(value: ast.expr, attr: str) -> bool:
    if attr in ALLOWED:
        return True
    return isinstance(value, ast.Name) and f"{value.id}.{attr}" in ALLOWED


def _declared(cls: ast.ClassDef) -> set[str]:
    """The names class `cls` itself declares: methods and class-level names, ``__slots__`` entries, and attributes
    its methods set on ``self`` or ``cls``."""
    out = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Name):
                out.add(t.id)
                if t.id == "__slots__" and stmt.value is not None:
                    out.update(c.value for c in ast.walk(stmt.value)
                               if isinstance(c, ast.Constant) and isinstance(c.value, str))
    stack = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                continue                              # a nested class declares its own names
            if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store) and _own(child.value):
                out.add(child.attr)
            stack.append(child)
    return out


def _import_findings(tree: ast.Module, module: str) -> list[tuple[int, str, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            source = "." * node.level + (node.module or "")
            if any(_private(p) for p in (node.module or "").split(".") if p):
                out.append((node.lineno, f"{module}:{source}", f"imports from the private module {source}"))
                continue
            for alias in node.names:
                if _private(alias.name):
                    out.append((node.lineno, f"{module}:{alias.name}",
                                f"imports the private name {alias.name} from {source}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(_private(p) for p in alias.name.split(".")):
                    out.append((node.lineno, f"{module}:{alias.name}", f"imports the private module {alias.name}"))
    return out


def _attribute_findings(tree: ast.Module, module: str) -> list[tuple[int, str, str]]:
    out = []

    def visit(node: ast.AST, declared: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            for dec in node.decorator_list + node.bases + node.keywords:
                visit(dec, declared)
            inner = _declared(node)
            for stmt in node.body:
                visit(stmt, inner)
            return
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (_own(node.value) or node.attr in declared or _allowed(node.value, node.attr)):
                what = f"{ast.unparse(node.value)}.{node.attr}"
                out.append((node.lineno, f"{module}:{what}", f"reaches into the private attribute {what}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PROBES
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            obj, attr = node.args[0], node.args[1].value
            if not (_own(obj) or attr in declared or _allowed(obj, attr)):
                what = f"{ast.unparse(obj)}.{attr}"
                out.append((node.lineno, f"{module}:{what}",
                            f"reaches into the private attribute {what} through {node.func.id}"))
        for child in ast.iter_child_nodes(node):
            visit(child, declared)

    visit(tree, set())
    return out


def findings_in(source: str, module: str) -> list[tuple[int, str, str]]:
    """(line, key, what) for every private name that the module `module`, whose text is `source`, borrows."""
    tree = ast.parse(source)
    return sorted(_import_findings(tree, module) + _attribute_findings(tree, module))


def _findings() -> list[tuple[Path, int, str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, key, what in findings_in(path.read_text(encoding="utf-8"), _module_name(path)):
            out.append((path, line, key, what))
    return out


def test_no_module_borrows_another_modules_private_names():
    found = _findings()
    root = PACKAGE.parent
    new = [f"{path.relative_to(root)}:{line}: {what} ('{key}'): make the name public in its module (a rename, "
           f"or a public method or property with a docstring) and use that; or, if it must stay, list '{key}' in "
           f"EXCEPTIONS in {Path(__file__).name} with the reason"
           for path, line, key, what in found if key not in EXCEPTIONS]
    assert not new, "private names borrowed across modules:\n" + "\n".join(new)


def test_every_listed_exception_still_occurs():
    keys = {key for _, _, key, _ in _findings()}
    stale = [f"'{key}' ({why})" for key, why in EXCEPTIONS.items() if key not in keys]
    assert not stale, ("EXCEPTIONS in " + Path(__file__).name + " lists borrowings that no longer occur; remove "
                       "them: " + "; ".join(stale))


def test_every_exception_and_allowance_gives_a_reason():
    for table in (EXCEPTIONS, ALLOWED):
        for key, why in table.items():
            assert isinstance(why, str) and len(why.split()) >= 6, f"{key}: give the reason in a sentence"


def test_the_check_sees_each_kind_of_borrowing():
    """The check is not vacuous: each kind of borrowing is found, and what is allowed is not."""
    source = '''
from __future__ import annotations
import collections
import pkg._impl
from .other import _helper, public
from ._impl import thing
from ..numerics.vectors import dot as _dot
import sys

def f(engine, point):
    engine._state = 1
    point._replace(x=1)
    sys._getframe(1)
    hasattr(engine, "_cache")
    return engine.run._get(), engine.__dict__

class C:
    __slots__ = ("_slot",)
    _shared = 0

    def __init__(self):
        self._value = 1
        super()._setup()

    def __eq__(self, other):
        return self._value == other._value and other._slot == other._shared

    @classmethod
    def build(cls):
        out = cls.__new__(cls)
        out._value = 2
        return out

    def peek(self, other):
        return other._hidden
'''
    keys = [key for _, key, _ in findings_in(source, "m")]
    assert keys == ["m:pkg._impl", "m:_helper", "m:._impl", "m:engine._state", "m:engine._cache",
                    "m:engine.run._get", "m:other._hidden"]
