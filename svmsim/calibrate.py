"""`svmsim calibrate`: measure the cluster at hand and write the ``[network]`` table that models it.

Two measurements, on the machine (a private local Ray) or the Ray cluster it joins:

* **Messages.** One actor calls another with payloads of several sizes (a Ray call carrying b bytes, what svmsim's
  Ray engines send); the median time of a call, halved for one way, is fitted by least squares to
  ``t(b) = latency + b / bandwidth``, the alpha-beta model of `schedule.cluster_time`. The fit's residual (relative
  RMS over the sizes) says how well two numbers describe the link. On a cluster of several Ray nodes the two actors
  sit on different nodes, so the table describes the network between them; on one machine it describes Ray's own
  path between processes (its per-call cost dominates the latency).
* **Compute.** Each Ray node runs a sparse pass (a CSR matrix-vector product and an axpy: two operations per
  nonzero, as paper 001's and paper 004's programs count their work) until about half a second has gone by; its
  rate is operations per second. The table's ``compute_rate`` is the median over the nodes, each node's rate is
  listed in a comment.

The table is printed (or written with ``--out``) with the measurements as comments above it.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import numba
import numpy as np

from .errors import ScenarioError, SvmsimError

__all__ = ["Calibration", "SIZES", "QUICK_SIZES", "calibrate", "fit_alpha_beta", "measure_compute_rate"]

#: payload sizes of the message measurement (bytes)
SIZES = (0, 1_000, 10_000, 100_000, 1_000_000, 4_000_000)
QUICK_SIZES = (0, 10_000, 1_000_000)


def fit_alpha_beta(sizes, seconds) -> tuple[float, float, float]:
    """The least-squares fit of ``seconds = alpha + sizes / beta``: (alpha, beta, relative RMS residual). alpha is
    kept >= 0 (a negative intercept is refitted through the origin); beta is inf where the times do not grow with
    the size."""
    b = np.asarray(sizes, np.float64)
    t = np.asarray(seconds, np.float64)
    if b.shape != t.shape or b.size < 2 or np.unique(b).size < 2:
        raise ValueError("fit_alpha_beta needs times for at least two different sizes")
    slope, alpha = np.polyfit(b, t, 1)
    if alpha < 0:
        alpha, slope = 0.0, float(b @ t / (b @ b))
    slope = max(float(slope), 0.0)
    fitted = alpha + slope * b
    residual = float(np.sqrt(np.mean((t - fitted) ** 2)) / np.mean(t)) if np.mean(t) > 0 else 0.0
    return float(alpha), (1.0 / slope if slope > 0 else math.inf), residual


@numba.njit(cache=True, nogil=True)
def _sparse_pass(indptr, indices, values, x, y):
    """y = A x, then x += 1e-12 y[:d] (two operations per nonzero, and a few per row)."""
    for i in range(indptr.shape[0] - 1):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += values[p] * x[indices[p]]
        y[i] = acc
    for j in range(x.shape[0]):
        x[j] += 1e-12 * y[j % y.shape[0]]


def measure_compute_rate(seconds: float = 0.5, rows: int = 20_000, cols: int = 2_000, density: float = 0.01,
                         seed: int = 0) -> float:
    """Operations per second of this process on a sparse pass (2 per nonzero), timed over about `seconds`."""
    rng = np.random.default_rng(seed)
    per_row = max(1, int(cols * density))
    indices = np.sort(rng.integers(0, cols, (rows, per_row)), axis=1).ravel().astype(np.int64)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    values = rng.standard_normal(indices.size)
    x, y = rng.standard_normal(cols), np.zeros(rows)
    _sparse_pass(indptr, indices, values, x, y)                 # compiled (or loaded) before the clock starts
    passes, start = 0, time.perf_counter()
    while True:
        _sparse_pass(indptr, indices, values, x, y)
        passes += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * indices.size * passes / elapsed


@dataclass
class Calibration:
    """What `calibrate` measured and fitted."""

    sizes: tuple
    seconds: list                  # median one-way seconds per size
    latency: float
    bandwidth: float
    residual: float
    node_rates: dict               # Ray node id -> operations per second
    between_nodes: bool            # the two actors sat on different Ray nodes
    wall_seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def compute_rate(self) -> float:
        return float(statistics.median(self.node_rates.values()))

    def table(self) -> str:
        """The ``[network]`` table, with the measurements as comments."""
        where = "between two Ray nodes" if self.between_nodes else "between two processes of one machine"
        lines = [f"# svmsim calibrate, {time.strftime('%Y-%m-%d %H:%M')}: a Ray call carrying b bytes {where},",
                 "# one way (half the median round trip), fitted by t = latency + b / bandwidth",
                 "#   bytes    " + " ".join(f"{s:>10d}" for s in self.sizes),
                 "#   seconds  " + " ".join(f"{t:10.3g}" for t in self.seconds),
                 f"#   fit residual (relative RMS over the sizes): {100 * self.residual:.1f} %",
                 "# compute: a sparse pass (2 operations per nonzero) on each Ray node, operations per second:"]
        lines += [f"#   {node[:12]}  {rate:.3g}" for node, rate in sorted(self.node_rates.items())]
        lines += [f"# {n}" for n in self.notes]
        bandwidth = self.bandwidth if math.isfinite(self.bandwidth) else 1e12
        lines += ["[network]", f"latency = {self.latency:.4g}", f"bandwidth = {bandwidth:.4g}",
                  f"compute_rate = {self.compute_rate:.4g}", ""]
        return "\n".join(lines)


def _ray():
    import ray

    return ray


def _actors():
    ray = _ray()

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, payload) -> int:
            return len(payload)

        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=0)
    class Pinger:
        def measure(self, echo, sizes, repeats) -> list:
            """Median one-way seconds per size (half the round trip of a call carrying the payload)."""
            out = []
            for size in sizes:
                payload = np.zeros(size, np.uint8)
                ray.get(echo.echo.remote(payload))                  # warm: the first call of a size sets up
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    ray.get(echo.echo.remote(payload))
                    times.append((time.perf_counter() - start) / 2)
                out.append(float(statistics.median(times)))
            return out

    @ray.remote(num_cpus=1)
    def compute_rate(seconds):
        return ray.get_runtime_context().get_node_id(), measure_compute_rate(seconds)

    return Echo, Pinger, compute_rate


def calibrate(address: str | None = None, *, sizes=SIZES, repeats: int = 30, compute_seconds: float = 0.5
              ) -> Calibration:
    """Measure the Ray cluster at `address` (None: a private local Ray, stopped afterwards)."""
    ray = _ray()
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .engine.ray_actors import ensure_ray, release_actors

    started = time.perf_counter()
    own = ensure_ray(address, {})
    actors = []
    try:
        Echo, Pinger, compute_rate = _actors()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        place = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes[:2]] if len(nodes) > 1 else [None] * 2
        echo = Echo.options(scheduling_strategy=place[0]).remote() if place[0] else Echo.remote()
        pinger = Pinger.options(scheduling_strategy=place[1]).remote() if place[1] else Pinger.remote()
        actors = [echo, pinger]
        seconds = ray.get(pinger.measure.remote(echo, list(sizes), int(repeats)), timeout=300)
        latency, bandwidth, residual = fit_alpha_beta(sizes, seconds)
        rates = dict(ray.get([compute_rate.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
                              .remote(compute_seconds) for n in nodes], timeout=300))
        notes = []
        if len(nodes) == 1:
            notes.append("one Ray node: the latency is Ray's cost of a call between processes, not a network's")
        return Calibration(tuple(sizes), seconds, latency, bandwidth, residual, rates, len(nodes) > 1,
                           time.perf_counter() - started, notes)
    except (GetTimeoutError, RayError) as err:
        raise SvmsimError(f"calibrate: the Ray measurement failed ({type(err).__name__}: {str(err).splitlines()[0]}); "
                          "allowed: a Ray cluster whose nodes answer within 300 s (--address, or none for a local "
                          "Ray)") from None
    finally:
        release_actors(actors, own)


def check_out_path(path: str) -> None:
    """Refuse an output path that cannot be written before anything is measured."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ScenarioError(f"--out {path!r} cannot be written (a folder, or a file in a folder that does not exist "
                            "or is not writable); allowed: a file path in a writable folder")
