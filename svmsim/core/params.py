"""Typed parameters of a registered piece (a topology kind, a fault kind): `ParamSpec` declares one parameter, and
`check_params` checks the names and types of the parameters a scenario or a caller gives, filling in defaults.
Every registry of named pieces with keyword parameters uses it, so their messages read alike."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["ParamSpec", "check_params", "allowed_params_text", "register_with_params"]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a registered piece.

    ``type`` is the accepted Python type (``int``, ``float``, ``bool``, ``str`` or ``list``; ``float`` also accepts
    ints, ``str`` also accepts path-like objects, ``list`` takes a list whose items have type ``item``).
    ``default`` is used when the parameter is omitted; ``None`` means "derived" (explained in ``description``).
    ``allowed`` is a human-readable range, and ``valid`` (optional) the predicate that checks it on a given value.
    A ``required`` parameter has no default and must be given. ``none_means`` says, in listings, what a default
    of ``None`` stands for.
    """

    type: type
    default: Any
    description: str
    allowed: str = ""
    required: bool = False
    item: type | None = None
    valid: Callable[[Any], bool] | None = None
    none_means: str = "auto"

    def type_name(self) -> str:
        return f"list[{self.item.__name__}]" if self.type is list and self.item else self.type.__name__

    def describe(self, name: str) -> str:
        """Render as ``name: type = default`` (or ``name: type (required)``) for listings."""
        if self.required:
            return f"{name}: {self.type_name()} (required)"
        default = self.none_means if self.default is None else repr(self.default)
        return f"{name}: {self.type_name()} = {default}"


def allowed_params_text(owner: str, params: Mapping[str, ParamSpec]) -> str:
    """``allowed parameters: ...`` (or ``<owner> takes no parameters``) for error messages."""
    if not params:
        return f"{owner} takes no parameters"
    return "allowed parameters: " + ", ".join(p.describe(n) for n, p in params.items())


def _scalar(value: Any, kind: type) -> tuple[bool, Any]:
    """(accepted, canonical value) of one scalar of type `kind`."""
    if kind is bool:
        return (True, bool(value)) if isinstance(value, (bool, np.bool_)) else (False, None)
    if isinstance(value, (bool, np.bool_)):
        return False, None
    if kind is int:
        return (True, int(value)) if isinstance(value, (int, np.integer)) else (False, None)
    if kind is float:
        if isinstance(value, (int, float, np.integer, np.floating)) and not math.isnan(float(value)):
            return True, float(value)
        return False, None
    if kind is str:
        if isinstance(value, str):
            return True, value
        if isinstance(value, os.PathLike):
            return True, os.fspath(value)
        return False, None
    raise TypeError(f"unsupported parameter type {kind!r}")  # pragma: no cover - registry bug


def _coerce(owner: str, name: str, value: Any, p: ParamSpec, error: type[Exception]) -> Any:
    """Check the type of one parameter value; return it in canonical Python type."""
    if value is None and p.default is None:
        return None
    if p.type is list:
        ok = isinstance(value, (list, tuple))
        items = [_scalar(v, p.item or int) for v in value] if ok else []
        ok = ok and all(accepted for accepted, _ in items)
        canonical = [v for _, v in items]
    else:
        ok, canonical = _scalar(value, p.type)
    if ok:
        if p.valid is not None and not p.valid(canonical):
            raise error(f"parameter '{name}' of {owner} = {value!r} is out of range; allowed: {p.allowed}")
        return canonical
    raise error(f"parameter '{name}' of {owner} must be of type {p.type_name()}, got {value!r} "
                f"({type(value).__name__})" + (f"; allowed: {p.allowed}" if p.allowed else ""))


def check_params(owner: str, params: Mapping[str, Any], specs: Mapping[str, ParamSpec],
                 error: type[Exception]) -> dict[str, Any]:
    """Check parameter names and types against `specs` and fill in defaults (no range checks).

    `owner` names the piece in messages (``"topology 'ring'"``); `error` is the exception raised for an unknown
    or missing required parameter, or a value of the wrong type."""
    for name in params:
        if name not in specs:
            raise error(f"unknown parameter {name!r} for {owner}; {allowed_params_text(owner, specs)}")
    missing = [name for name, p in specs.items() if p.required and params.get(name) is None]
    if missing:
        raise error(f"{owner} needs parameter(s) {', '.join(map(repr, missing))}; "
                    f"{allowed_params_text(owner, specs)}")
    resolved = {name: p.default for name, p in specs.items()}
    for name, value in params.items():
        resolved[name] = _coerce(owner, name, value, specs[name], error)
    return resolved


def register_with_params(table: dict, item: Any, what: type, register: str, label: str, function: str,
                         hint: str) -> Any:
    """Put a named piece with typed parameters (a fault kind, a codec: `what`, with ``name``, ``params`` and the
    callable attribute `function`) into the registry `table`, after the checks every such registry makes; returns
    it. `register` names the registering function and `label` the kind of piece in the messages; `hint` is the
    allowed signature of `function`. The same name registered again by another module is refused."""
    from ..errors import PluginError

    if not isinstance(item, what) or not isinstance(item.name, str) or not item.name.isidentifier():
        raise PluginError(f"{register} takes a {what.__name__} whose name is an identifier, got {item!r}")
    fn = getattr(item, function)
    if not callable(fn):
        raise PluginError(f"{label} {item.name!r}: {function} = {fn!r} is not callable; allowed: {hint}")
    if not all(isinstance(p, ParamSpec) for p in item.params.values()):
        raise PluginError(f"{label} {item.name!r}: params must map names to ParamSpec")
    old = table.get(item.name)
    if old is not None and old is not item and getattr(old, function).__module__ != fn.__module__:
        noun = label.split()[-1]
        raise PluginError(f"{label} {item.name!r} is registered twice: by module {getattr(old, function).__module__} "
                          f"and by module {fn.__module__}; allowed: a name of its own for each {noun}")
    table[item.name] = item
    return item
