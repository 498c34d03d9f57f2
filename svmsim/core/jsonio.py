"""The one JSON writer of svmsim: strict JSON (RFC 8259) that every reader takes.

Python's `json.dumps` writes ``Infinity``, ``-Infinity`` and ``NaN`` by default, which strict readers (JavaScript's
``JSON.parse``, jq, Go, Rust's serde_json) refuse. Here a non-finite float is written as the string ``"inf"`` or
``"-inf"``, and NaN as ``null``; NumPy scalars and arrays as their plain values; anything else through `default`
(its ``str`` unless given). The text is then encoded with ``allow_nan=False``, so nothing non-strict gets out.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np

__all__ = ["dumps", "strict"]


def _float(x: float) -> float | str | None:
    if math.isfinite(x):
        return x
    return None if math.isnan(x) else ("inf" if x > 0 else "-inf")


def strict(obj: Any, default: Callable[[Any], Any] = str) -> Any:
    """`obj` with every value JSON can hold strictly: non-finite floats as "inf", "-inf" or None, NumPy values
    as plain ones, tuples as lists, other objects through `default`."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return _float(obj)
    if isinstance(obj, dict):
        return {(k if isinstance(k, (str, int, bool)) or k is None else str(strict(k, default))): strict(v, default)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v, default) for v in obj]
    if isinstance(obj, np.ndarray):
        return strict(obj.tolist(), default)
    if isinstance(obj, np.generic):
        return strict(obj.item(), default)
    return strict(default(obj), default)


def dumps(obj: Any, *, indent: int | None = 2, default: Callable[[Any], Any] = str) -> str:
    """Strict JSON text of `obj` (see the module's description)."""
    return json.dumps(strict(obj, default), indent=indent, allow_nan=False)
