"""Live metrics for the Ray dashboard (Prometheus/Grafana) through `ray.util.metrics`.

Exported series (Ray prefixes ``ray_`` and adds ``_total`` to counters):

    svmsim_messages{scenario, tag, role}      counter   logical messages sent, by message tag and sender role
    svmsim_scalars{scenario, tag, role}       counter   scalars sent
    svmsim_bytes{scenario, tag, role}         counter   bytes sent
    svmsim_round{scenario}                    gauge     current synchronous round
    svmsim_iteration{scenario}                gauge     completed algorithm iterations
    svmsim_objective{scenario}                gauge     objective at the last evaluation
    svmsim_rel_gap{scenario}                  gauge     certified relative duality gap (runs that report rel_gap)
    svmsim_accuracy{scenario, split}          gauge     train / test accuracy
    svmsim_node_work{scenario, quantity}      counter   node quantities the meter records (e.g. kernel_evaluations)

Gossip runs on Ray export the counters as run totals (tag "all", role "all": their hosts' meters settle only
totals at an evaluation point). Ray exports every `metrics_report_interval_ms` (10 s by default, at least 1 s):
these are for watching a run; the ledger in the run directory is for counting. Gauges are re-set at every
evaluation because Ray drops gauges that are not updated for a while. A private Ray that svmsim starts exports every
second (`engine.ray_actors.METRICS_REPORT_MS`), and before the run lets it go, `LiveMetrics.finish` waits until this
node's endpoint shows the run's final counters, so that the dashboard's last point is the ledger's.
"""
from __future__ import annotations

import time
import urllib.request

import numpy as np

from .comm.quantities import MESSAGE_QUANTITIES, by_kind
from .core.metrics import metric

__all__ = ["METRIC_NAMES", "LiveMetrics", "metrics_endpoint", "FINAL_EXPORT_WAIT_S"]

#: how long the end of a run waits at most for Ray's metrics agent to show its final counters (a private Ray
#: exports every second; a joined cluster every `metrics_report_interval_ms`, 10 s by default)
FINAL_EXPORT_WAIT_S = 12.0


def metrics_endpoint() -> str | None:
    """The Prometheus endpoint of this process's Ray node (its metrics agent), or None when it has none or Ray is
    not initialised here (asking Ray's runtime context would start a Ray of its own)."""
    import ray

    if not ray.is_initialized():
        return None
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id and node.get("MetricsExportPort"):
            return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    return None


def exported_scalars(endpoint: str, scenario: str) -> float:
    """The scalars counter that `endpoint` shows for `scenario` (its lines of role "all": every tag once)."""
    text = urllib.request.urlopen(endpoint, timeout=5).read().decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("ray_svmsim_scalars_total{")
             and f'scenario="{scenario}"' in ln and 'role="all"' in ln]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)

_MESSAGES, _SCALARS = MESSAGE_QUANTITIES.index("messages"), MESSAGE_QUANTITIES.index("scalars")

METRIC_NAMES = (*(f"svmsim_{q}" for q in MESSAGE_QUANTITIES), "svmsim_round", "svmsim_iteration",
                "svmsim_objective", "svmsim_rel_gap", "svmsim_accuracy", "svmsim_node_work")


class LiveMetrics:
    def __init__(self, scenario: str):
        from ray.util.metrics import Counter, Gauge

        self.scenario = scenario
        keys = ("scenario", "tag", "role")
        # one counter per message quantity of the registry, in its order (the rows of the totals below)
        self.sent = tuple(Counter(f"svmsim_{q.name}", description=q.description, tag_keys=keys)
                          for q in by_kind("message"))
        self.round = Gauge("svmsim_round", description="synchronous round", tag_keys=("scenario",))
        self.iteration = Gauge("svmsim_iteration", description="completed iterations", tag_keys=("scenario",))
        self.objective = Gauge("svmsim_objective", description="objective", tag_keys=("scenario",))
        self.rel_gap = Gauge("svmsim_rel_gap", description=metric("rel_gap").label, tag_keys=("scenario",))
        self.accuracy = Gauge("svmsim_accuracy", description="accuracy", tag_keys=("scenario", "split"))
        self.node_work = Counter("svmsim_node_work", description="work the nodes did (e.g. kernel evaluations)",
                                 tag_keys=("scenario", "quantity"))
        self._sent: dict[tuple[str, str], np.ndarray] = {}
        self._work: dict[str, float] = {}
        # what the endpoint showed for this scenario before the run's first export (earlier runs of the same name,
        # in this process or another on the same cluster, add to the same series), and what this run added
        self._baseline: float | None = None
        self._exported = 0.0

    def update(self, meter, metrics: dict, deployment) -> None:
        """Export what changed since the last call (the meter's per-tag totals split by sender role)."""
        role_of = {}
        for spec in deployment.roles:
            for n in spec.node_ids:
                role_of[int(n)] = spec.role
        totals: dict[tuple[str, str], np.ndarray] = {}
        if meter.log is None and meter.n_nodes <= 1024:
            # by tag from the meter; the sender role of a tag is the role of its senders in the edge ledger
            edges = meter.edge_matrix()
            sent_by_role: dict[str, np.ndarray] = {}
            for node in range(meter.n_nodes):
                role = role_of.get(node, "node")
                sent_by_role[role] = sent_by_role.get(role, 0) + edges[:, node, :].sum(axis=1)
            for tag, amounts in meter.by_tag.items():
                totals[(tag, "all")] = np.array(amounts, dtype=float)
            for role, v in sent_by_role.items():
                totals[("all", role)] = np.asarray(v, dtype=float)
        else:
            for tag, amounts in meter.by_tag.items():
                totals[(tag, "all")] = np.array(amounts, dtype=float)
        for quantity, total in meter.node_quantity_totals().items():
            delta = float(total) - self._work.get(quantity, 0.0)
            if delta > 0:
                self.node_work.inc(delta, tags={"scenario": self.scenario, "quantity": quantity})
            self._work[quantity] = float(total)
        self._export(totals, metrics)

    def update_totals(self, messages: int, scalars: int, bytes_: int, metrics: dict) -> None:
        """Export run totals without a meter at hand (gossip on Ray: the hosts' meters report only totals at
        an evaluation point), as tag "all", role "all"."""
        self._export({("all", "all"): np.array([messages, scalars, bytes_], dtype=float)}, metrics)

    def _shown(self) -> float:
        """The scalars the node's endpoint shows for this scenario now (0 when it cannot be read)."""
        try:
            endpoint = metrics_endpoint()
            return exported_scalars(endpoint, self.scenario) if endpoint is not None else 0.0
        except Exception:  # noqa: BLE001 - watching a run must never fail it (an agent not up, a bad scrape)
            return 0.0

    def finish(self, wait: float = FINAL_EXPORT_WAIT_S) -> dict:
        """Before the run lets Ray go: wait (at most `wait` seconds) until this node's Prometheus endpoint shows
        every scalar this run exported for the scenario (on top of what it showed before the run), so that the
        dashboard's last point is the run's end. Returns {"endpoint", "final_exported", "waited_s"} for the run
        summary."""
        started = time.perf_counter()
        endpoint = None
        seen = False
        try:
            endpoint = metrics_endpoint()
            want = (self._baseline or 0.0) + self._exported
            while endpoint is not None:
                seen = exported_scalars(endpoint, self.scenario) == want
                if seen or time.perf_counter() - started >= wait:
                    break
                time.sleep(0.2)
        except Exception:  # noqa: BLE001 - the endpoint did not answer or Ray could not say where: report, not fail
            seen = False
        return {"endpoint": endpoint, "final_exported": seen, "waited_s": time.perf_counter() - started}

    def _export(self, totals: dict, metrics: dict) -> None:
        """Counters by what was sent since the last export; gauges from the evaluation's metrics."""
        if self._baseline is None:
            self._baseline = self._shown()
        for key, v in totals.items():
            prev = self._sent.get(key, np.zeros(len(self.sent)))
            delta = v - prev
            tags = {"scenario": self.scenario, "tag": key[0], "role": key[1]}
            if delta[_MESSAGES] > 0:
                for counter, amount in zip(self.sent, delta):
                    counter.inc(float(amount), tags=tags)
                if key[1] == "all":
                    self._exported += float(delta[_SCALARS])
            self._sent[key] = v
        st = {"scenario": self.scenario}
        self.round.set(float(metrics.get("round", 0)), tags=st)
        self.iteration.set(float(metrics.get("iteration", 0)), tags=st)
        if metrics.get("objective") is not None:
            self.objective.set(float(metrics["objective"]), tags=st)
        if metrics.get("rel_gap") is not None and np.isfinite(metrics["rel_gap"]):
            self.rel_gap.set(float(metrics["rel_gap"]), tags=st)
        for split in ("train", "test"):
            v = metrics.get(f"{split}_accuracy")
            if v is not None:
                self.accuracy.set(float(v), tags={"scenario": self.scenario, "split": split})
