"""The worker node program (role "worker"): a group of paper 001's machines, each with its block of the dual."""
from __future__ import annotations

import numpy as np

from ...comm.collectives import Plan, plan
from ...core.streams import STREAM_PROGRAM, stream_keys
from ..allreduce import AllreduceWorker
from .protocol import ARMIJO, EXACT, extra_columns, worker_state, worker_step
from .tron import tron_state, tron_step

__all__ = ["Method", "WorkerProgram", "allreduce_plan"]


class Method:
    """One of paper 001's methods as the worker runs it: the step rule and the local subproblem's curvature."""

    def __init__(self, rule: int, *, loss_s: float, upper: float, tau: float, sigma: float, passes: int = 1,
                 armijo_beta: float = 0.5, armijo_sigma: float = 0.1):
        self.rule, self.s, self.upper, self.tau, self.sigma = rule, loss_s, upper, tau, sigma
        self.passes, self.armijo_beta, self.armijo_sigma = passes, armijo_beta, armijo_sigma

    def columns(self, dim: int) -> list[str]:
        """The all-reduce's combine per column: the d-vector, then the rule's scalars."""
        return ["sum"] * dim + extra_columns(self.rule)

    @property
    def extra(self) -> int:
        return len(extra_columns(self.rule))

    def describe(self) -> str:
        return {EXACT: "exact line search (d + 3 sums + 1 min)", ARMIJO: "Armijo (d + 3 sums)"}.get(
            self.rule, "fixed step (d sums)")


def allreduce_plan(pattern: str, workers: int, dim: int, method: Method, branching: int = 2) -> Plan:
    """The one all-reduce per iteration among workers 0..K-1 (the star and the tree rooted at worker 0)."""
    return plan("allreduce", pattern, np.arange(workers, dtype=np.int64), dim + method.extra, branching=branching,
                combine=method.columns(dim))


class WorkerProgram(AllreduceWorker):
    """Paper 001's BQO and its dual baselines (the `Method` says which)."""

    step_function = staticmethod(worker_step)

    def __init__(self, plan_: Plan, dim: int, method: Method):
        super().__init__(plan_, dim)
        self.method = method

    def init(self, node_ids, node_data, seed):
        m = self.method
        keys = stream_keys(seed, STREAM_PROGRAM, int(self.plan.nodes.max()) + 1)[np.asarray(node_ids)]
        shards = [(nd["X"], nd["y"]) for nd in node_data]
        st = worker_state(self.plan, np.asarray(node_ids, np.int64), shards, self.dim,
                          self.tag_ids(), rule=m.rule, s=m.s, upper=m.upper, tau=m.tau,
                          sigma=m.sigma, passes=m.passes, armijo_beta=m.armijo_beta, armijo_sigma=m.armijo_sigma,
                          keys=keys)
        return st, self.plan.max_out(node_ids), np.asarray(node_ids, np.int64)

    def observe(self, state):
        """Per node: ids, rows (points held), iteration, the round its current all-reduce started; alpha of every
        member in node order; once per group: w and the last step (eta, g, q, lambda) (every worker holds the
        same) and the last round the group was stepped in."""
        st, _, ids = state
        n = len(ids)
        return {"ids": ids, "rows": np.diff(st.row_lo), "alpha": st.alpha.copy(),
                "iteration": np.full(n, st.iteration[0]), "started": np.full(n, st.start_round[0]),
                "group": {"w": st.w.copy(), "last": st.last.copy(), "stepped": int(st.last_round[0])}}


class TronProgram(AllreduceWorker):
    """Distributed TRON's worker; the all-reduce carries d + 1."""

    step_function = staticmethod(tron_step)

    def __init__(self, plan_: Plan, dim: int, C: float):
        super().__init__(plan_, dim)
        self.C = C

    def init(self, node_ids, node_data, seed):
        shards = [(nd["X"], nd["y"]) for nd in node_data]
        st = tron_state(self.plan, np.asarray(node_ids, np.int64), shards, self.dim,
                        self.tag_ids(), self.C)
        return st, self.plan.max_out(node_ids), np.asarray(node_ids, np.int64)

    def observe(self, state):
        """Per node: ids, iteration (Newton steps), all-reduces done, the round the current one started; once per
        group: w, f, the trust region, CG steps, the last round stepped."""
        st, _, ids = state
        n = len(ids)
        return {"ids": ids, "iteration": np.full(n, st.iteration[0]), "allreduces": np.full(n, st.allreduces[0]),
                "started": np.full(n, st.start_round[0]),
                "group": {"w": st.w.copy(), "f": float(st.f[0]), "delta": float(st.delta[0]),
                          "cg_steps": int(st.cg_steps[0]), "stepped": int(st.last_round[0])}}
