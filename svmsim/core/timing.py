"""Time in svmsim's simulations: random durations, node clocks and the alpha-beta cost of a message.

* `Distribution`: a non-negative random duration (constant, uniform, exponential, log-normal), drawn from two
  counter-based uniforms (`core.streams`), so a draw depends only on its stream and counter.
* `Clock`: every node's clock (Poisson or periodic with jitter); `tick_gap` draws the time to its next tick.
* `LatencyModel`: the alpha-beta model of a message's time on a link, ``alpha + bytes / beta``: alpha a
  `Distribution` per message (times a fixed factor per edge), beta the bandwidth in bytes per unit of virtual time.
  The gossip event loop draws it per message; `LatencyModel.message_time` gives it for a given size and draw.
* `churn_gap`: churn's alternating up- and down-times.

Foundations: imports nothing of svmsim but its errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from ..errors import ScenarioError
from .streams import counter_uniform, standard_normal

__all__ = ["Distribution", "DISTRIBUTIONS", "sample_duration", "Clock", "CLOCKS", "tick_gap", "LatencyModel",
           "churn_gap", "is_number"]

#: distribution kinds and their parameters
DISTRIBUTIONS = {"constant": ("value",), "uniform": ("low", "high"), "exponential": ("mean",),
                 "lognormal": ("median", "sigma")}
_DIST_CODE = {"constant": 0, "uniform": 1, "exponential": 2, "lognormal": 3}
_DIST_ALLOWED = {"value": "a number >= 0", "low": "a number >= 0", "high": "a number >= low",
                 "mean": "a number > 0", "median": "a number > 0", "sigma": "a number >= 0"}


@numba.njit(cache=True)
def sample_duration(code, a, b, u1, u2):
    """A draw of distribution `code` with parameters (a, b) from two uniforms (see `Distribution`)."""
    if code == 0:
        return a
    if code == 1:
        return a + (b - a) * u1
    if code == 2:
        return -a * math.log(u1)
    return a * math.exp(b * standard_normal(u1, u2))


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

    def sample(self, u1: float, u2: float = 0.5) -> float:
        """The draw of this distribution for uniforms (u1, u2) in (0, 1)."""
        return float(sample_duration(self.code, self.a, self.b, u1, u2))



CLOCKS = ("poisson", "periodic")


@numba.njit(cache=True)
def tick_gap(periodic, rate, jitter, u, first):
    """Time from one tick of a node's clock to its next (from time 0 to the first tick when `first`)."""
    if periodic == 0:
        return -math.log(u) / rate
    period = 1.0 / rate
    if first:
        return period * u
    return period * (1.0 + jitter * (2.0 * u - 1.0))


@dataclass(frozen=True)
class Clock:
    """Each node's clock: ``poisson`` (exponential gaps of mean 1/rate) or ``periodic`` (gaps of 1/rate times a
    uniform factor in [1 - jitter, 1 + jitter], first tick at a uniform phase). Stragglers run at rate/factor."""

    kind: str = "poisson"
    rate: float = 1.0
    jitter: float = 0.0

    def __post_init__(self):
        if self.kind not in CLOCKS:
            raise ScenarioError(f"clock = {self.kind!r} is not a clock; allowed: {', '.join(CLOCKS)}")
        if not is_number(self.rate) or not (0 < float(self.rate) < math.inf):
            raise ScenarioError(f"rate = {self.rate!r} is out of range; allowed: a number > 0")
        if not is_number(self.jitter) or not 0 <= float(self.jitter) < 1:
            raise ScenarioError(f"jitter = {self.jitter!r} is out of range; allowed: a number in [0, 1)")
        if self.kind == "poisson" and self.jitter:
            raise ScenarioError(f"jitter = {self.jitter!r} applies to the periodic clock only; allowed: "
                                "clock = \"periodic\", or jitter = 0")


@dataclass(frozen=True)
class LatencyModel:
    """How long a message takes: ``distribution`` (per message) times a fixed factor per edge, plus
    ``bytes / bandwidth``.

    edge_spread: sigma of the per-edge factor ``exp(edge_spread * Z_edge)`` (one standard normal Z per undirected
        edge, drawn from the seed): heterogeneous links whose median latency differs; 0 makes all links alike.
    bandwidth: bytes per unit of virtual time; ``None`` for no size-dependent term.
    """

    distribution: Distribution = field(default_factory=lambda: Distribution.constant(0.01))
    bandwidth: float | None = None
    edge_spread: float = 0.0

    def __post_init__(self):
        if not isinstance(self.distribution, Distribution):
            object.__setattr__(self, "distribution", Distribution.from_config(self.distribution, "latency"))
        if self.bandwidth is not None and (not is_number(self.bandwidth) or not float(self.bandwidth) > 0):
            raise ScenarioError(f"bandwidth = {self.bandwidth!r} is out of range; allowed: a number > 0 (bytes per "
                                "unit of virtual time)")
        if not is_number(self.edge_spread) or not 0 <= float(self.edge_spread) < math.inf:
            raise ScenarioError(f"edge_spread = {self.edge_spread!r} is out of range; allowed: a number >= 0")

    def message_time(self, nbytes: int, u1: float, u2: float = 0.5, edge_factor: float = 1.0) -> float:
        """alpha + bytes / beta for one message: the latency draw for uniforms (u1, u2) times the edge's factor,
        plus its size over the bandwidth."""
        beta = self.bandwidth if self.bandwidth is not None else math.inf
        return self.distribution.sample(u1, u2) * edge_factor + nbytes / beta


@numba.njit(cache=True)
def churn_gap(up_rate, mean_down, key, counter):
    """Churn's durations for one node: even counters draw up-times (mean 1/up_rate), odd counters down-times
    (mean mean_down)."""
    mean = mean_down if counter % 2 == 1 else 1.0 / up_rate
    return -mean * math.log(counter_uniform(key, counter))
