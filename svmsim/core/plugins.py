"""Plugins: pieces that live outside svmsim and are found by entry point or named by module.

One mechanism serves every kind of piece. An installed distribution declares its pieces in the entry-point group of
their kind (`GROUPS`), e.g. in its ``pyproject.toml``::

    [project.entry-points."svmsim.algorithms"]
    my-subgrad = "mypkg.subgrad"            # a module that calls svmsim.api.register(...) when imported
    my-pegasos = "mypkg.gossip:ALGORITHM"   # or an object: an AlgorithmInfo, or a list of them

and the registry of that kind (`svmsim.algorithms.registry`, `svmsim.topology`, `svmsim.data.partition`) asks
`entry_points(kind)` for the names it does not know. Code that is not installed is named by module in a scenario
(``[algorithm] module = "mypkg.algo"``): `import_module` resolves it against the scenario file's folder, then
``sys.path``. Every failure is a `PluginError` that names the module and what it lacks.

Modules found beside a scenario file (outside ``sys.path``) are remembered (`external_paths`), so that engines in
other processes (Ray actors) can be given the same code (`ray_runtime_env`).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from ..errors import PluginError

__all__ = ["lazy_attributes", "registered_names", "find_registered", "GROUPS", "entry_points", "load_entry_point", "provide", "import_module", "external_paths",
           "ray_runtime_env", "Deferred", "deferred"]

#: kind of piece -> its entry-point group
GROUPS = {"algorithms": "svmsim.algorithms", "topologies": "svmsim.topologies", "partitions": "svmsim.partitions",
          "faults": "svmsim.faults", "engines": "svmsim.engines", "codecs": "svmsim.codecs"}

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: folders added to sys.path for modules found beside a scenario file, in the order they were added
_EXTERNAL: list[str] = []
_LOADED: dict[tuple[str, str], Any] = {}


def _group(kind: str) -> str:
    if kind not in GROUPS:
        raise ValueError(f"unknown kind of plugin {kind!r}; allowed: {', '.join(GROUPS)}")
    return GROUPS[kind]


def entry_points(kind: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of every installed distribution in `kind`'s group, by name (nothing is imported)."""
    group = _group(kind)
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


def _distribution(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else "an installed distribution"


def load_entry_point(kind: str, name: str) -> Any:
    """Load the entry point `name` of `kind` (once): what its value names, a module or an object in one."""
    key = (kind, name)
    if key in _LOADED:
        return _LOADED[key]
    eps = entry_points(kind)
    if name not in eps:
        raise PluginError(f"no entry point {name!r} in group {_group(kind)!r}; allowed: "
                          f"{', '.join(sorted(eps)) or '(none installed)'}")
    ep = eps[name]
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is the plugin's, said as such
        raise PluginError(f"entry point {name!r} = {ep.value!r} of {_distribution(ep)} (group {ep.group!r}) "
                          f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
    _LOADED[key] = obj
    return obj


def provide(kind: str, name: str, register: Callable[[Any], Any], known: Callable[[str], bool], what: type) -> None:
    """Load the entry point `name` of `kind` so that `name` becomes known: a module registers its pieces when
    imported; an object of type `what` (or a list of them) is passed to `register`. PluginError, naming the entry
    point and its distribution, when it cannot be loaded, gives something else, or does not provide `name`."""
    ep = entry_points(kind)[name]
    where = f"entry point {name!r} = {ep.value!r} of {_distribution(ep)} (group {ep.group!r})"
    loaded = load_entry_point(kind, name)
    if not isinstance(loaded, ModuleType):
        items = [loaded] if isinstance(loaded, what) else loaded
        if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__") \
                or not all(isinstance(i, what) for i in items):
            raise PluginError(f"{where} gives {type(loaded).__name__}; allowed: a module that registers its "
                              f"{kind} when imported, a {what.__name__}, or a list of them")
        for item in items:
            try:
                register(item)
            except PluginError as exc:
                raise PluginError(f"{where}: {exc}") from None
    if not known(name):
        raise PluginError(f"{where} provides no {kind.rstrip('s')} named {name!r}; allowed: the entry point's name "
                          f"is the name of what it registers")


def import_module(name: str, base: str | Path | None = None, what: str = "module") -> ModuleType:
    """Import the module `name` (dotted), looked for first in the folder `base` (a scenario file's folder), then on
    ``sys.path``. A folder it was found in that is not on ``sys.path`` is put there (and into `external_paths`),
    so that the module's own imports and pickled references to it work. `what` names the key in messages."""
    if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
        raise PluginError(f"{what} = {name!r} is not a module name; allowed: a dotted Python module name such as "
                          "'mypkg.algo', importable from the scenario file's folder or from sys.path")
    top = name.split(".")[0]
    if base is not None and top not in sys.modules:
        folder = Path(base).resolve()
        if (folder / top).is_dir() or (folder / f"{top}.py").is_file():
            path = str(folder)
            if path not in sys.path:
                sys.path.insert(0, path)
            if path not in _EXTERNAL:
                _EXTERNAL.append(path)
            importlib.invalidate_caches()
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        found, cause = None, exc
    else:
        cause = None
    if found is None:
        where = f"the folder {Path(base).resolve()} or sys.path" if base is not None else "sys.path"
        raise PluginError(f"{what} = {name!r}: no such module in {where}"
                          + (f" ({type(cause).__name__}: {cause})" if cause else "")
                          + "; allowed: a module importable from the scenario file's folder or an installed package")
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - the module's own error, said as the plugin's
        raise PluginError(f"{what} = {name!r} was found but importing it failed: {type(exc).__name__}: {exc}") \
            from exc


class Deferred:
    """A function named ``"package.module:function"`` and imported at its first call, so that a declaration (an
    algorithm's registration, a topology kind's spec) can name its implementation without importing its numerics:
    validating a scenario or listing what exists then stays fast. ``__module__`` and ``__name__`` are the target's,
    as registries read them; `resolve` returns the function itself."""

    def __init__(self, ref: str):
        module, _, name = ref.partition(":") if isinstance(ref, str) else ("", "", "")
        if not _MODULE_NAME.fullmatch(module) or not name.isidentifier():
            raise ValueError(f"deferred({ref!r}): allowed: 'package.module:function'")
        self.ref, self.__module__, self.__name__, self._target = ref, module, name, None

    def resolve(self) -> Callable:
        """The function itself (imported on first use)."""
        if self._target is None:
            self._target = getattr(importlib.import_module(self.__module__), self.__name__)
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"deferred({self.ref!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deferred) and other.ref == self.ref

    def __hash__(self) -> int:
        return hash(self.ref)

    def __reduce__(self):
        return Deferred, (self.ref,)


def deferred(ref: str) -> Deferred:
    """The function ``"package.module:function"``, imported at its first call (`Deferred`)."""
    return Deferred(ref)


def external_paths() -> list[str]:
    """The folders `import_module` added to ``sys.path`` (modules found beside scenario files)."""
    return list(_EXTERNAL)


def ray_runtime_env(folders: list[str] | None = None, job: bool = True) -> dict | None:
    """A Ray runtime environment that gives workers the modules found beside scenario files (`external_paths`, or
    the given `folders`), or None when there are none: installed plugins reach the workers as any installed package
    does. ``job=True``: for ``ray.init`` (Ray copies ``py_modules`` to every node of the cluster); ``job=False``: for
    one actor of a Ray that was started without them (their folders on the worker's ``PYTHONPATH``: workers on this
    machine only, as Ray uploads local modules only for a whole job)."""
    folders = external_paths() if folders is None else list(folders)
    if not folders:
        return None
    if not job:
        path = os.pathsep.join(folders + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        return {"env_vars": {"PYTHONPATH": path}}
    modules = sorted({str(Path(p) / m) for p in folders for m in _top_modules(p)})
    return {"py_modules": modules} if modules else None


def _top_modules(folder: str) -> list[str]:
    out = []
    for entry in Path(folder).iterdir():
        if entry.suffix == ".py" and entry.stem.isidentifier():
            out.append(entry.name)
        elif entry.is_dir() and entry.name.isidentifier() and (entry / "__init__.py").is_file():
            out.append(entry.name)
    return [m for m in out if m.removesuffix(".py") in sys.modules]


def lazy_attributes(package: str, namespace: dict, submodule: str = "methods") -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for a family package whose ``__init__`` registers its algorithms and keeps
    its numerics in `submodule`: a name the package does not define is read from `submodule` (the submodule itself
    under its own name), imported on first use and then kept in `namespace`, so that registering the family and
    validating a scenario import none of its numerics. Use: ``__getattr__ = lazy_attributes(__name__, globals())``."""
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{submodule}")
        value = module if name == submodule else getattr(module, name)
        namespace[name] = value
        return value

    return __getattr__


def registered_names(kind: str, table: dict) -> list[str]:
    """The names a registry of `kind` knows: those in `table` (built in or registered), then its installed plugins'
    entry points (none imported)."""
    return list(table) + sorted(set(entry_points(kind)) - set(table))


def find_registered(kind: str, table: dict, name: Any, register: Callable[[Any], Any], what: type) -> Any:
    """`table[name]`, loading the plugin that provides it on first use (`provide`); None for a name nothing
    provides."""
    if not isinstance(name, str):
        return None
    if name not in table and name in entry_points(kind):
        provide(kind, name, register, lambda k: k in table, what)
    return table.get(name)
