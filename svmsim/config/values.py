"""Names of a scenario's tables, plain values, and TOML: `dump_toml` writes a resolved scenario with tomli-w,
`show` writes one value as a TOML file would hold it, on one line, for error messages."""
from __future__ import annotations

import datetime as _dt
import enum
import os
from typing import Any, Mapping

import numpy as np
import tomli_w
from pydantic import BaseModel


#: The tables of a scenario file, in the order they are written.
SECTIONS = ("data", "partition", "topology", "engine", "algorithm", "stop", "output", "schedule", "faults",
            "network", "compression")

#: The keys of a scenario file outside its tables.
TOP_KEYS = ("name", "description", "seed")

#: Keys of ``[data]`` that only apply to ``name = "synthetic"`` (forwarded to the generator).
SYNTHETIC_KEYS = ("kind", "n", "d", "beta", "flip_band", "density", "zero_plane", "positive_class", "noise",
                  "positive_fraction", "max_norm", "zero_rows", "duplicates", "constant")

#: The kind of synthetic data generated when ``[data] kind`` is not given.
DEFAULT_SYNTHETIC_KIND = "separable"


def as_plain_str(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    return is_int(value) or isinstance(value, (float, np.floating))


#: TOML integers are signed 64-bit (the TOML 1.0 specification); tomllib itself reads any size
INT64_RANGE = (-2**63, 2**63 - 1)


def out_of_machine_range(value: Any, path: tuple = ()) -> list[tuple[tuple, Any, str]]:
    """Every value in a scenario (tables and lists walked) that no key accepts: an integer outside TOML's signed
    64-bit range, or a float that is nan or infinite. Returns ``(key path, value, what is wrong)`` triples."""
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in out_of_machine_range(v, path + (str(k),))]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in out_of_machine_range(v, path)]
    if is_int(value) and not INT64_RANGE[0] <= int(value) <= INT64_RANGE[1]:
        return [(path, value, "is outside TOML's 64-bit integer range; allowed: integers from -2^63 to 2^63 - 1")]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return [(path, value, ("is not a finite number; allowed: finite numbers (nan and inf are refused "
                               "everywhere in a scenario)"))]
    return []


def plain(value: Any, *, toml: bool = False) -> Any:
    """A model, dict or value as plain TOML/JSON-friendly Python data; ``None`` entries of tables are dropped (with
    ``toml``, ``None`` items of lists too: TOML has no null)."""
    if isinstance(value, BaseModel):
        return plain(value.model_dump(), toml=toml)
    if isinstance(value, Mapping):
        return {str(k): plain(v, toml=toml) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [plain(v, toml=toml) for v in items if not (toml and v is None)]
    if isinstance(value, enum.Enum):
        return plain(value.value, toml=toml)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.ndarray):
        return plain(value.tolist(), toml=toml)
    if isinstance(value, np.generic):
        return value.item()
    return value


def normalise(value: Any) -> Any:
    """Numpy scalars to Python scalars, paths to strings, tuples to lists (for dict sources and overrides)."""
    if isinstance(value, Mapping):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def dump_toml(d: Mapping[str, Any]) -> str:
    """Write a dict as TOML: scalars and lists first, then one ``[table]`` (or ``[a.b]``) per nested dict.

    ``None`` values are left out (TOML has no null); numpy scalars, tuples and paths are written as numbers, lists
    and strings. ``tomllib.loads(dump_toml(d)) == d`` for dicts of strings, numbers, booleans, dates, lists and
    nested dicts without ``None``.
    """
    if not isinstance(d, Mapping):
        raise TypeError(f"dump_toml expects a dict, got {type(d).__name__}")
    return tomli_w.dumps(plain(d, toml=True))


def show(value: Any) -> str:
    """A value as it would be written in TOML on one line (strings in double quotes), for error messages."""
    try:
        return _inline(value)
    except (TypeError, ValueError):
        return repr(value)


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        # pragma: no mutate start (equivalent: the dummy value 0 is cut off, any one-digit value gives the same key)
        items = [f"{tomli_w.dumps({str(k): 0})[:-5]} = {_inline(v)}" for k, v in value.items() if v is not None]
        # pragma: no mutate end
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value if v is not None) + "]"
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    # pragma: no mutate start (equivalent: the one-letter key "v" or "V" is cut off by [4:-1])
    return tomli_w.dumps({"v": normalise(value)})[4:-1].replace("\t", "\\t")   # a tab stays visible
    # pragma: no mutate end
