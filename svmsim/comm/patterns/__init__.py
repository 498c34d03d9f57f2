"""The registry of collective patterns: one module per pattern in this folder, each defining one `Pattern`
subclass and registering it with `register`.

One module per pattern (rather than one class each in a shared module) so that adding a pattern is adding one
file: the package imports every module beside this one (in name order) when it is first imported, so nothing else
lists the patterns. `PATTERNS` (in `comm.collectives`), the algorithms' ``allreduce`` keys and ``allreduce =
"auto"`` all read this registry. The registered order is: star, ring, tree, binomial (the built-in order, kept
for error messages), then every other module's patterns by module name.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import Layout, Pattern, RingsPattern, TreePattern, chunk_bounds, combine_np, fail

__all__ = ["Layout", "Pattern", "RingsPattern", "TreePattern", "chunk_bounds", "combine_np", "fail",
           "get_pattern", "pattern_names", "register"]

_REGISTRY: dict[str, Pattern] = {}
_FIRST = ("star", "ring", "tree", "binomial")


def register(cls: type[Pattern]) -> type[Pattern]:
    """Register a pattern class by its `name` (a class decorator); a second pattern of the same name is refused."""
    if not cls.name or not isinstance(cls.name, str):
        raise TypeError(f"pattern {cls.__name__} has no name; allowed: a class attribute name = \"...\"")
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"pattern {cls.name!r} is registered twice ({type(_REGISTRY[cls.name]).__name__} and "
                         f"{cls.__name__}); allowed: one pattern per name")
    _REGISTRY[cls.name] = cls()
    return cls


def pattern_names() -> tuple[str, ...]:
    """The registered patterns' names (the built-in four first)."""
    return tuple([n for n in _FIRST if n in _REGISTRY] + [n for n in _REGISTRY if n not in _FIRST])


def get_pattern(name: str) -> Pattern:
    """The registered pattern of this name, or a `ProtocolError` naming the registered ones."""
    unit = _REGISTRY.get(name) if isinstance(name, str) else None
    if unit is None:
        raise fail(f"pattern {name!r} is unknown", ", ".join(pattern_names()))
    return unit


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")


_discover()
