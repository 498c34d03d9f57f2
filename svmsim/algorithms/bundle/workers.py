"""The worker node program (role "worker") of paper 004's methods: a group of machines, each with its block of the
examples, the replicated w and (qp-BMRM) the replicated bundle."""
from __future__ import annotations

import numpy as np

from ...comm.collectives import Plan, plan
from ..allreduce import AllreduceWorker
from .protocol import PHASE_MAIN, PRAGAM, QP_BMRM, bias_step, bundle_state, bundle_step, extra_scalars

__all__ = ["BundleProgram", "bundle_plan", "solo_state"]


def bundle_plan(pattern: str, workers: int, dim: int, method: int, branching: int = 2) -> Plan:
    """The one all-reduce per iteration among workers 0..K-1: the d-vector and the method's scalars, all summed."""
    return plan("allreduce", pattern, np.arange(workers, dtype=np.int64), dim + extra_scalars(method),
                branching=branching)


class BundleProgram(AllreduceWorker):
    """Pragam, ls-BMRM, qp-BMRM or Pegasos-n (`protocol`'s method constant)."""

    @property
    def step_function(self):
        """The numba round step, read from the module (a dispatcher kept on the instance would travel to a Ray
        host by value and be compiled there afresh, without numba's disk cache: half a minute for `bias_step`)."""
        return bias_step if self.probe is not None else bundle_step

    def __init__(self, plan_: Plan, dim: int, probe: Plan | None = None, **constants):
        """`probe`: Pragam-b's root probes over K > 1 workers (`protocol.probe_plan`), an auxiliary collective
        with tags "probe" and "probe-total"."""
        super().__init__(plan_, dim)
        self.probe = probe if probe is not None and probe.k > 1 else None
        if self.probe is not None:
            table = self.probe.tag_table("probe", "probe-total")
            self.tags += tuple(t for t, _ in table)
            self.widths = np.concatenate([self.widths, np.array([w for _, w in table], np.int64)])
        self.constants = constants

    def init(self, node_ids, node_data, seed):
        shards = [(nd["X"], nd["y"]) for nd in node_data]
        ids = np.asarray(node_ids, np.int64)
        st = bundle_state(self.plan, ids, shards, self.dim, self.tag_ids(), seed=int(seed), probe=self.probe,
                          **self.constants)
        max_out = self.plan.max_out(ids) + (self.probe.max_out(ids) if self.probe is not None else 0)
        return st, max_out, ids

    def observe(self, state):
        """Per node: ids, iteration, the round its current all-reduce started; once per group: w, the best J seen
        and the certified lower bound, the last (J, D) pair, the bundle's facts, the last round stepped."""
        st, _, ids = state
        n = len(ids)
        group = {"w": st.w.copy(), "j_best": float(st.j_best[0]), "lower": float(st.lower[0]),
                 "j_last": float(st.j_last[0]), "d_last": float(st.d_last[0]), "stepped": int(st.last_round[0])}
        if self.probe is not None:            # Pragam-b's root probes (the auxiliary collective)
            group.update(aux_done=int(st.probes_done[0]), aux_started=int(st.aux_start_round[0]),
                         in_flight="main" if st.phase[0] == PHASE_MAIN else "aux", main_done=int(st.main_done[0]))
        if st.method == QP_BMRM:
            group.update(bundle_size=int(st.bundle_size[0]), qp_steps=int(st.qp_steps[0]),
                         qp_gap=float(st.qp_gap[0]), qp_failures=int(st.qp_failures[0]),
                         compactions=int(st.compactions[0]))
        return {"ids": ids, "iteration": np.full(n, st.iteration[0]), "started": np.full(n, st.start_round[0]),
                "group": group}


def solo_state(X, y, method: int, lam: float, **constants):
    """The state of one worker holding every row of CSR `X` (labels `y` in {-1, +1}), run without transport by
    `protocol.run_solo` (the estimators, benchmarks and tests): the K = 1 case of the scenarios' runs. Pragam's L
    is computed here unless given; `constants` are `bundle_state`'s (domain, offset, max_bundle, ...)."""
    import math

    from .objective import lipschitz

    n, d = X.shape
    constants.setdefault("offset", 1.0)
    if "lipschitz" not in constants:
        constants["lipschitz"] = lipschitz(X, lam) if method == PRAGAM else math.nan
    return bundle_state(bundle_plan("star", 1, d, method), np.array([0]), [(X, y)], d, {"partial": 0, "total": 1},
                        method=method, lam=lam, n_total=n, **constants)
