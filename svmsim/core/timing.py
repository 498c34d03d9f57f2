"""Time in svmsim's simulations: random durations, node clocks and the alpha-beta cost of a message.

* `Distribution` (declared in `core.distributions`): a non-negative random duration (constant, uniform,
  exponential, log-normal), drawn (`sample_duration`, `sample`) from two counter-based uniforms (`core.streams`), so
  a draw depends only on its stream and counter.
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
from .distributions import CLOCKS, DISTRIBUTIONS, Distribution, is_number
from .streams import counter_uniform, standard_normal

__all__ = ["Distribution", "DISTRIBUTIONS", "sample_duration", "sample", "Clock", "CLOCKS", "tick_gap",
           "LatencyModel", "churn_gap", "is_number"]


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





def sample(distribution: Distribution, u1: float, u2: float = 0.5) -> float:
    """The draw of `distribution` for uniforms (u1, u2) in (0, 1)."""
    return float(sample_duration(distribution.code, distribution.a, distribution.b, u1, u2))


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
        return sample(self.distribution, u1, u2) * edge_factor + nbytes / beta


@numba.njit(cache=True)
def churn_gap(up_rate, mean_down, key, counter):
    """Churn's durations for one node: even counters draw up-times (mean 1/up_rate), odd counters down-times
    (mean mean_down)."""
    mean = mean_down if counter % 2 == 1 else 1.0 / up_rate
    return -mean * math.log(counter_uniform(key, counter))
