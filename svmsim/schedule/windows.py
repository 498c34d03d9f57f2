"""Conservative time windows: gossip on several hosts that gives the run of one host, bit for bit.

A message takes at least the smallest latency L that the latency model allows on the topology's edges
(`smallest_latency`). If every host handles only the events of one window ``[T, T + W)`` with ``W <= L``, no message
sent in the window can arrive inside it: each host runs its window on its own, and the messages for other hosts are
handed over when every host has finished it. Every random draw is counter based (`core.streams`) and a node's state
depends only on the events at that node, taken in time order, so the hosts together handle exactly the events of
the one-host run (`schedule.gossip`), each node's in the same order. (Events at exactly the same instant at one
node are the exception: one host orders those by when they were pushed. Clocks and latencies drawn from continuous
distributions make such ties a probability-zero event.)

`WindowHost` runs one `EventHost` window by window; `run_windows` is the driver, written against a `step` callable
so that the same loop drives hosts in this process (tests) or in Ray actors (`engine.ray_gossip`, deterministic
mode). A window starts at the earliest pending event (empty stretches of time are skipped) and ends after W, at
the next evaluation point (every host's state there is the one-host state at that instant, so the observer sees
the one-host rows) or at the time budget (inclusive, as one host's budget is).

The end of a run by the programs' ``done`` signal, which no host sees alone, is found exactly: each host hands back
whenever its programs' signal changes (`event_kernels.ST_DONE_CHANGE`), and the driver finds the first instant at
which every host is done. Hosts may have run past that instant within its window, so the run is then replayed from
its start (`reset`) with that instant as its time budget: a run that ends this way costs up to twice as long.
Budgets on messages and scalars, which one host meets at an exact message, are not offered in this mode.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np

from ..core.streams import counter_uniform, standard_normal
from ..core.timing import LatencyModel
from ..errors import ScenarioError, SvmsimError
from .event_host import EventHost
from .event_kernels import (ST_BAD_EDGE, ST_DONE_CHANGE, ST_FLUSH, ST_GROW, ST_QUIESCENT, ST_TIME, ST_XFLUSH,
                            ST_YIELD)

__all__ = ["smallest_latency", "WindowHost", "WindowOutcome", "run_windows", "WINDOW_STOPS"]

#: stop reasons of `run_windows` (the names of `schedule.gossip.GossipStopReason`)
WINDOW_STOPS = ("time", "quiescent", "done", "observer", "wall")


def smallest_latency(latency: LatencyModel, adj_ptr: np.ndarray, adj: np.ndarray, edge_key) -> float:
    """The least time a message can take on the topology (CSR neighbour lists adj_ptr / adj): the latency
    distribution's minimum times the smallest per-edge factor (`event_kernels.send_fate`'s ``exp(edge_spread *
    Z_edge)``, drawn from `edge_key`); sizes over the bandwidth and fault delays only add to it. Raises
    ScenarioError when it is 0 (then no window is safe)."""
    dist = latency.distribution
    low = float(dist.minimum)
    if not low > 0:
        raise ScenarioError(
            f"deterministic gossip on Ray needs a smallest message latency > 0 (time windows no longer than it), "
            f"but [schedule] latency = {dist.to_config()} can be {low:g}; allowed: a constant > 0, a uniform "
            "distribution with low > 0 or a lognormal with sigma = 0, or [engine] gossip = \"free\"")
    if latency.edge_spread > 0:
        z = _least_edge_normal(adj_ptr, adj, edge_key)
        # the loop computes each edge's factor in compiled code: leave room for its last bit
        low = low * math.exp(latency.edge_spread * z) * (1.0 - 1e-9)
    return low


@numba.njit(cache=True)
def _least_edge_normal(adj_ptr, adj, edge_key):
    """The least per-edge standard normal Z_edge over the topology's edges (`event_kernels.send_fate`'s draws)."""
    n = adj_ptr.shape[0] - 1
    least = math.inf
    for i in range(n):
        for p in range(adj_ptr[i], adj_ptr[i + 1]):
            j = adj[p]
            lo = min(i, j)
            e = lo * n + (i + j - lo)
            least = min(least, standard_normal(counter_uniform(edge_key, 2 * e), counter_uniform(edge_key, 2 * e + 1)))
    return least if least < math.inf else 0.0


def _merge(into: dict, parts_by_host: dict) -> None:
    for dest, parts in parts_by_host.items():
        into.setdefault(dest, []).extend(parts)


class WindowHost:
    """One host of a windowed run: its `EventHost` (budgets off, no evaluation grid: the driver cuts the windows)
    and `observe`, which returns its groups' observations."""

    def __init__(self, host: EventHost, observe: Callable[[], dict]):
        self.host = host
        self.observe = observe
        host.pause_on_done = True
        host.next_eval = math.inf

    def step(self, incoming: list, limit: float, snapshot: bool) -> dict:
        """Put the messages of other hosts on the heap (`incoming`: their parts lists, in the order of the sending
        hosts), handle every event up to `limit` and return: ``out`` (messages for other hosts, ``{host: parts}``),
        ``top`` (the next event's time), ``done`` (the programs' signal now), ``changes`` (``(time, done)`` at every
        change of it in this window) and, with `snapshot`, this host's counters and observations."""
        host = self.host
        for parts in incoming:
            host.put_incoming(parts)
        out: dict = {}
        changes = []
        while True:
            status = host.advance(limit)
            if status in (ST_TIME, ST_QUIESCENT):
                break
            if status == ST_XFLUSH:
                _merge(out, host.take_outgoing())
            elif status == ST_DONE_CHANGE:
                changes.append((host.now, host.done))
            elif status == ST_GROW:
                host.grow()
            elif status in (ST_FLUSH, ST_YIELD):
                host.flush()
            elif status == ST_BAD_EDGE:
                host.raise_bad_edge()
            else:
                raise SvmsimError(f"a windowed gossip host got loop status {status}, which windows never ask for")
        _merge(out, host.take_outgoing())
        counters = host.counters()
        if counters["late"]:
            raise SvmsimError(f"{counters['late']} message(s) from other hosts arrived after their receiver's clock "
                              "had passed their arrival time: the time window is longer than the smallest latency")
        result = {"out": out, "top": host.heap_top(), "done": host.done, "changes": changes}
        if snapshot:
            host.flush()
            m = host.meter
            counters.update(messages=m.messages, scalars=m.scalars, bytes=m.bytes, in_flight=host.pending(),
                            observations=self.observe())
            result["snapshot"] = counters
        return result


@dataclass
class WindowOutcome:
    """Why a windowed run stopped (one of `WINDOW_STOPS`), the windows it took (both passes), whether it was
    replayed (a ``done`` stop), and the messages still between hosts at the end (``{host: [parts, ...]}``: to be
    put on their receivers' heaps and metered in flight, as one host meters what is on its heap)."""

    reason: str
    windows: int
    replayed: bool
    transit: list


def _route(results: list[dict], n: int) -> tuple[list, float, int]:
    """Messages for each host (its incoming parts lists, by sending host), their earliest arrival and count."""
    transit: list[list] = [[] for _ in range(n)]
    first, count = math.inf, 0
    for r in results:                       # in the order of the sending hosts
        for dest, parts in r["out"].items():
            transit[dest].append(parts)
            for p in parts:
                times = p[4]
                if times.shape[0]:
                    first = min(first, float(times.min()))
                    count += int(times.shape[0])
    return transit, first, count


def _first_all_done(done: list[bool], changes: list[list]) -> float | None:
    """The first instant in a window at which every host is done, from each host's state at its start and its
    changes in it."""
    state = list(done)
    for t, j, d in sorted((t, j, d) for j, ch in enumerate(changes) for t, d in ch):
        state[j] = d
        if all(state):
            return t
    return None


def _pass(step, n: int, width: float, max_time: float, eval_time: float | None, observe, deadline: float,
          counts: dict) -> tuple[str, float | None, list]:
    """One run from the hosts' current state: (reason, the instant every host became done or None, transit)."""
    results = step([([], -math.inf, False)] * n)            # each host's first event
    tops = [r["top"] for r in results]
    done = [r["done"] for r in results]
    transit: list[list] = [[] for _ in range(n)]
    arrive = math.inf
    next_eval = eval_time if eval_time is not None else math.inf
    while True:
        if time.perf_counter() >= deadline:  # pragma: no mutate (equivalent for >: a continuous clock)
            return "wall", None, transit
        start = min(min(tops), arrive)
        if math.isinf(start):
            return "quiescent", None, transit
        evaluate = next_eval <= max_time and next_eval <= start   # an evaluation point before the next event
        inclusive = False
        if evaluate:
            end = next_eval
        elif start > max_time:
            return "time", None, transit
        else:
            end = start + width
            if next_eval <= end and next_eval <= max_time:
                end, evaluate = next_eval, True
            elif end > max_time:
                end, inclusive = max_time, True
        limit = end if inclusive else float(np.nextafter(end, -math.inf))
        results = step([(transit[j], limit, evaluate) for j in range(n)])
        counts["windows"] += 1
        transit, arrive, between = _route(results, n)
        tops = [r["top"] for r in results]
        t_done = _first_all_done(done, [r["changes"] for r in results])
        done = [r["done"] for r in results]
        if t_done is not None:
            return "done", t_done, transit
        if evaluate:
            snaps = [r["snapshot"] for r in results]
            snaps[0]["in_flight"] += between                    # sent, not yet on their receivers' heaps
            at = next_eval
            next_eval = at + eval_time
            if observe(snaps, at):
                return "observer", None, transit


def run_windows(step: Callable[[list[tuple]], list[dict]], reset: Callable[[], None], n_hosts: int, width: float,
                *, max_time: float | None = None, eval_time: float | None = None,
                observe: Callable[[list[dict], float], bool] | None = None,
                max_seconds: float | None = None) -> WindowOutcome:
    """Run hosts in time windows of `width` (at most the smallest latency) until the time budget, no event left,
    every host done, the observer says stop, or the wall-clock budget.

    step(requests): one ``(incoming, limit, snapshot)`` per host (`WindowHost.step`'s arguments) -> their results,
    in host order. reset(): every host back to its state before the run (a ``done`` stop replays the run to the
    instant every host became done). observe(snapshots, at) is called at virtual times eval_time, 2*eval_time, ...
    with the hosts' snapshots (their ``in_flight`` counts include the messages between hosts) and returns True to
    stop.
    """
    if not width > 0:
        raise ScenarioError(f"time window = {width!r} is out of range; allowed: a number > 0")
    deadline = math.inf if max_seconds is None else time.perf_counter() + max_seconds
    limit_time = math.inf if max_time is None else float(max_time)
    counts = {"windows": 0}
    reason, t_done, transit = _pass(step, n_hosts, width, limit_time, eval_time if observe else None, observe,
                                    deadline, counts)
    if reason != "done":
        return WindowOutcome(reason, counts["windows"], False, transit)
    reset()
    reason, _, transit = _pass(step, n_hosts, width, t_done, None, None, deadline, counts)
    return WindowOutcome("done" if reason in ("done", "time") else reason, counts["windows"], True, transit)
