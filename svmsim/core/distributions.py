"""Random durations as a scenario declares them: `Distribution` (constant, uniform, exponential, log-normal), read
from a number or a table and checked, and the clock kinds (`CLOCKS`). `core.timing` draws them.

Foundations: imports nothing of svmsim but its errors, and no compiler, so that validating a scenario stays light.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ScenarioError

__all__ = ["Distribution", "DISTRIBUTIONS", "CLOCKS", "is_number"]

#: distribution kinds and their parameters
DISTRIBUTIONS = {"constant": ("value",), "uniform": ("low", "high"), "exponential": ("mean",),
                 "lognormal": ("median", "sigma")}
_DIST_CODE = {"constant": 0, "uniform": 1, "exponential": 2, "lognormal": 3}
_DIST_ALLOWED = {"value": "a number >= 0", "low": "a number >= 0", "high": "a number >= low",
                 "mean": "a number > 0", "median": "a number > 0", "sigma": "a number >= 0"}


def _article(word: str) -> str:
    vowel_sound = word[0] in "aeio" or (word[0] == "u" and not word.startswith(("uni", "use", "usu")))
    return ("an " if vowel_sound else "a ") + word


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class Distribution:
    """A non-negative random duration: ``constant(value)``, ``uniform(low, high)``, ``exponential(mean)`` or
    ``lognormal(median, sigma)`` (``median * exp(sigma * Z)``). In a scenario it is a number (a constant) or an
    inline table such as ``{kind = "lognormal", median = 0.01, sigma = 0.5}``."""

    kind: str = "constant"
    params: tuple = (0.0,)

    def __post_init__(self):
        if self.kind not in DISTRIBUTIONS:
            raise ScenarioError(f"distribution kind {self.kind!r} is unknown; allowed: {', '.join(DISTRIBUTIONS)}")
        names = DISTRIBUTIONS[self.kind]
        if len(self.params) != len(names):
            raise ScenarioError(f"{_article(self.kind)} distribution takes {', '.join(names)}")
        for name, v in zip(names, self.params):
            bad = not is_number(v) or not math.isfinite(float(v)) or (
                float(v) <= 0 if name in ("mean", "median") else float(v) < 0)
            if name == "high" and not bad:
                bad = float(v) < float(self.params[0])
            if bad:
                raise ScenarioError(f"{name} = {v!r} is out of range for {_article(self.kind)} distribution; allowed: "
                                    f"{_DIST_ALLOWED[name]}")
        object.__setattr__(self, "params", tuple(float(v) for v in self.params))

    # -- constructors ---------------------------------------------------------------------------------------------
    @classmethod
    def constant(cls, value: float) -> "Distribution":
        return cls("constant", (value,))

    @classmethod
    def uniform(cls, low: float, high: float) -> "Distribution":
        return cls("uniform", (low, high))

    @classmethod
    def exponential(cls, mean: float) -> "Distribution":
        return cls("exponential", (mean,))

    @classmethod
    def lognormal(cls, median: float, sigma: float) -> "Distribution":
        return cls("lognormal", (median, sigma))

    @classmethod
    def from_config(cls, value: Any, name: str = "distribution") -> "Distribution":
        """A number (constant) or a table ``{kind = ..., <params>}``; errors name ``name.key``, value and range."""
        if isinstance(value, Distribution):
            return value
        if is_number(value):
            if not math.isfinite(float(value)) or float(value) < 0:
                raise ScenarioError(f"{name} = {value!r} is out of range; allowed: a number >= 0 (a constant), or "
                                    f"a table {{kind = ..., ...}} with kind one of {', '.join(DISTRIBUTIONS)}")
            return cls.constant(float(value))
        if not isinstance(value, dict):
            raise ScenarioError(f"{name} = {value!r} has the wrong type: expected a number or a table "
                                f"{{kind = ..., ...}} with kind one of {', '.join(DISTRIBUTIONS)}")
        kind = value.get("kind")
        if kind not in DISTRIBUTIONS:
            raise ScenarioError(f"{name}.kind = {kind!r} is not a distribution; allowed: {', '.join(DISTRIBUTIONS)}")
        names = DISTRIBUTIONS[kind]
        for key in value:
            if key != "kind" and key not in names:
                raise ScenarioError(f"unknown key '{name}.{key}' for {_article(kind)} distribution; allowed keys: kind, "
                                    f"{', '.join(names)}")
        params = []
        for key in names:
            if key not in value:
                raise ScenarioError(f"{name}.{key} is missing; {_article(kind)} distribution needs {', '.join(names)} "
                                    f"({', '.join(f'{k}: {_DIST_ALLOWED[k]}' for k in names)})")
            v = value[key]
            if not is_number(v):
                raise ScenarioError(f"{name}.{key} = {v!r} has the wrong type: expected a number")
            params.append(float(v))
        try:
            return cls(kind, tuple(params))
        except ScenarioError as exc:
            raise ScenarioError(f"{name}.{exc}") from None

    def to_config(self) -> dict:
        return {"kind": self.kind, **dict(zip(DISTRIBUTIONS[self.kind], self.params))}

    # -- use --------------------------------------------------------------------------------------------------------
    @property
    def code(self) -> int:
        return _DIST_CODE[self.kind]

    @property
    def a(self) -> float:
        return self.params[0]

    @property
    def b(self) -> float:
        return self.params[1] if len(self.params) > 1 else 0.0

    @property
    def minimum(self) -> float:
        """The least value a draw can take (0 for the exponential, and for a lognormal with sigma > 0)."""
        if self.kind in ("constant", "uniform") or (self.kind == "lognormal" and self.b == 0):
            return self.a
        return 0.0

    @property
    def mean(self) -> float:
        if self.kind == "constant":
            return self.a
        if self.kind == "uniform":
            return 0.5 * (self.a + self.b)
        if self.kind == "exponential":
            return self.a
        return self.a * math.exp(0.5 * self.b ** 2)


#: the kinds of a node's clock: exponential gaps between ticks, or a fixed period (with jitter)
CLOCKS = ("poisson", "periodic")
