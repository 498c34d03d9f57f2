"""The runs paper 001's methods build from their scenario parameters (`params`; the registry's `build`).

Every distributed method runs K workers (nodes 0..K-1, named worker-0..) doing one all-reduce per iteration over
the `allreduce` pattern; the pattern's edges must be edges of the scenario's topology (a switched cluster is
``[topology] kind = "complete"``: every pattern is defined on it). The evaluator (never metered, as the authors'
evaluation is untimed) computes the primal at the current w, the dual, the pocket (the best primal iterate so far,
Gallant 1990; it is the returned model) and the relative measures against a certified reference optimum.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ...core.metrics import relative_gap
from ...program import RoleSpec
from ..allreduce import check_problem, declared_scalars, worker_layout
from ..stall import CertificateStall
from .objective import (
    as_csr,
    dual_objective,
    loss_constants,
    primal_objective,
    reference_optimum,
    where_the_gap_lies,
)
from .params import BQOAParams, BQOParams, DistributedParams, DualCDParams, TronParams
from .protocol import ADD, ARMIJO, AVERAGE, EXACT
from .workers import Method, WorkerProgram, allreduce_plan

__all__ = [
    "METHODS",
    "BQOAParams",
    "BQOParams",
    "DistributedParams",
    "DualCDParams",
    "Evaluator",
    "build_distributed",
    "build_dual_cd",
]


#: name -> (step rule, Params, the local curvature's scale sigma(K), uses tau)
METHODS = {
    "bqo-e": (EXACT, BQOParams, lambda k: 1.0, True),
    "bqo-a": (ARMIJO, BQOAParams, lambda k: 1.0, True),
    "disdca": (ADD, DistributedParams, lambda k: float(k), False),
    "dsvm-ave": (AVERAGE, DistributedParams, lambda k: 1.0, False),
}


#: iterations after which a certified gap that has stopped falling, with the primal converged, stops a run with
#: its diagnosis (`algorithms.stall`)
STALL_PATIENCE = 200


class Evaluator:
    """The metrics of an iterate (w, alpha) against a certified reference optimum f*, with the pocket: the iterate
    of lowest primal seen at an evaluation point (the returned model; evaluating every iteration gives the
    paper's pocket). Rows: primal (current w), dual (f(alpha), minimised: -f(alpha) is a lower bound on the optimum
    of (1)), objective (pocket primal), rel_dual (eq. 28), rel_primal (pocket), duality_gap (pocket primal + dual),
    gap_per_cn (eq. 27 with the pocket primal: the duality gap over C n), rel_gap (the certified relative duality
    gap of `svmsim.core.metrics`, with gap_upper = the pocket primal and gap_lower = -f(alpha)), accuracies of the
    pocket w. A certified gap that stalls while the pocket primal has converged adds a ``diagnosis`` naming where
    the gap lies (the run stops); an uncertified reference leaves rel_dual and rel_primal NaN (never a stop
    target)."""

    def __init__(self, X, y, C: float, loss: str, X_test=None, y_test=None):
        self.X, self.y, self.C, self.loss = X, y, float(C), loss
        self.s, self.upper = loss_constants(loss, C)
        self.X_test, self.y_test = X_test, y_test
        self.ref = reference_optimum(X, y, C, loss)
        self.stall = CertificateStall(STALL_PATIENCE, explain=lambda: where_the_gap_lies(X, y, self.alpha, C, loss))
        self.alpha = None
        self.pocket_primal, self.pocket_w, self.pocket_iteration = math.inf, np.zeros(X.shape[1]), 0

    def metrics(self, w: np.ndarray, alpha: np.ndarray | None, iteration: int, eta: float | None = None) -> dict:
        """Metrics of the pair (w = X^T Y alpha, alpha); alpha None: a primal method's w, with the dual point of the
        L2 loss's optimality conditions alpha_i = 2C max(0, 1 - y_i w^T x_i) (feasible: U = inf)."""
        f_star = self.ref.f_star if self.ref.certified else math.nan     # an uncertified reference is no target
        margins = np.asarray(self.X @ w).ravel() * self.y
        primal = primal_objective(self.X, self.y, w, self.C, self.loss, margins)
        if alpha is None:
            alpha = 2.0 * self.C * np.maximum(0.0, 1.0 - margins)
            dual = dual_objective(np.asarray(self.X.T @ (self.y * alpha)).ravel(), alpha, self.s)
        else:
            dual = dual_objective(w, alpha, self.s)
        if primal < self.pocket_primal:
            self.pocket_primal, self.pocket_w, self.pocket_iteration = primal, w.copy(), int(iteration)
        best = self.pocket_primal
        out = {"iteration": int(iteration), "primal": primal, "dual": dual, "objective": best,
               "pocket_iteration": self.pocket_iteration, "rel_dual": abs((dual - f_star) / f_star),
               "rel_primal": (best + f_star) / -f_star, "duality_gap": best + dual,
               "gap_per_cn": (best + dual) / (self.C * self.X.shape[0]),
               "rel_gap": relative_gap(best, -dual), "gap_upper": best, "gap_lower": -dual,
               "train_accuracy": float(np.mean(np.asarray(self.X @ self.pocket_w).ravel() * self.y > 0))}
        self.alpha = alpha
        why = self.stall.update(iteration, best + dual, best)
        if why:
            out["diagnosis"] = why
        if eta is not None:
            out["eta"] = eta
        if self.X_test is not None and self.y_test is not None and len(self.y_test):
            pred = np.where(np.asarray(self.X_test @ self.pocket_w).ravel() > 0, 1.0, -1.0)
            out["test_accuracy"] = float(np.mean(pred == self.y_test))
        return out

    def info(self) -> dict:
        r = self.ref
        source = (f"svmsim dual coordinate descent, {r.epochs} epochs, certified by its duality gap" if r.certified
                  else f"none: svmsim's dual coordinate descent failed its certificate after {r.epochs} epochs "
                       f"({r.cause}); rel_dual and rel_primal are NaN")
        return {"C": self.C, "loss": self.loss, "s": self.s, "U": self.upper if math.isfinite(self.upper) else "inf",
                "f_star": r.f_star if r.certified else math.nan, "f_star_rel_uncertainty": r.rel_uncertainty,
                "f_star_source": source}


def build_distributed(name: str, params: DistributedParams, problem):
    from ...deployment import Deployment

    ds = problem.dataset
    if name == "tron":
        return _build_tron(params, problem)
    rule, _, sigma_of, uses_tau = METHODS[name]
    k = params.workers
    s, upper = loss_constants(params.loss, params.C)
    tau = params.tau if (uses_tau and params.loss == "hinge") else 0.0
    method = Method(rule, loss_s=s, upper=upper, tau=tau, sigma=sigma_of(k), passes=params.passes,
                    armijo_beta=getattr(params, "armijo_beta", 0.5), armijo_sigma=getattr(params, "armijo_sigma", 0.1))
    X, y, layout = _layout(params, problem, method.extra)
    p = allreduce_plan(layout.pattern, k, ds.d, method, params.branching)
    layout.check(p)
    roles = [RoleSpec("worker", WorkerProgram(p, ds.d, method), np.arange(k, dtype=np.int64),
                      layout.node_data(X, y))]
    evaluator = Evaluator(X, y, params.C, params.loss, ds.X_test, ds.y_test)
    order = np.concatenate(layout.parts)

    def gather(obs):
        by_node = {}
        w = it = last = None
        for o in obs["worker"]:
            lo = np.concatenate([[0], np.cumsum(o["rows"])])
            for j, node in enumerate(o["ids"]):
                by_node[int(node)] = o["alpha"][lo[j]:lo[j + 1]]
            w, it, last = o["group"]["w"], int(o["iteration"][0]), o["group"]["last"]
        return np.concatenate([by_node[i] for i in range(k)]), w, it, last

    def evaluate(obs):
        alpha, w, it, last = gather(obs)
        in_rows = np.empty(ds.n)
        in_rows[order] = alpha                 # alpha_i beside row i of X (the workers hold them by block)
        return evaluator.metrics(w, in_rows, it, eta=float(last[0]))

    def declared(obs):
        """Every completed iteration's all-reduce, and the steps of the one under way."""
        return declared_scalars(p, gather(obs)[2], obs["worker"])

    def model(obs):
        alpha, w, _, _ = gather(obs)
        dense = np.empty(ds.n)
        dense[order] = alpha
        return {"coef": evaluator.pocket_w.copy(), "intercept": 0.0, "w_last": w, "alpha": dense}

    return Deployment(
        roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
        declared_scalars=declared, comm_unit=("d", float(ds.d)), model=model,
        info={"workers": k, "allreduce": layout.pattern, "scalars_per_iteration": p.scalars(),
              "messages_per_iteration": p.messages(), "rounds_per_iteration": p.rounds(), "step": method.describe(),
              "tau": tau, **evaluator.info()})


def _layout(params: DistributedParams, problem, extra: int):
    """Data and the workers' layout (checked) shared by the distributed methods."""
    ds = problem.dataset
    check_problem(ds, params.workers)
    layout = worker_layout(problem, params.workers, params.allreduce, ds.d + extra)
    return as_csr(ds.X), np.asarray(ds.y, np.float64), layout


def _build_tron(params, problem):
    from ...comm.collectives import plan as make_plan
    from ...deployment import Deployment
    from .workers import TronProgram

    ds = problem.dataset
    k = params.workers
    X, y, layout = _layout(params, problem, 1)
    p = make_plan("allreduce", layout.pattern, np.arange(k, dtype=np.int64), ds.d + 1, branching=params.branching)
    layout.check(p)
    roles = [RoleSpec("worker", TronProgram(p, ds.d, params.C), np.arange(k, dtype=np.int64),
                      layout.node_data(X, y))]
    evaluator = Evaluator(X, y, params.C, "squared_hinge", ds.X_test, ds.y_test)

    def evaluate(obs):
        o = obs["worker"][0]
        m = evaluator.metrics(o["group"]["w"], None, int(o["iteration"][0]))
        m.update(trust_region=o["group"]["delta"], cg_steps=o["group"]["cg_steps"],
                 allreduces=int(o["allreduces"][0]))
        return m

    def declared(obs):
        return declared_scalars(p, int(obs["worker"][0]["allreduces"][0]), obs["worker"])

    def model(obs):
        return {"coef": evaluator.pocket_w.copy(), "intercept": 0.0, "w_last": obs["worker"][0]["group"]["w"]}

    return Deployment(
        roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
        declared_scalars=declared, comm_unit=("d", float(ds.d)), model=model,
        info={"workers": k, "allreduce": layout.pattern, "scalars_per_allreduce": p.scalars(),
              "messages_per_allreduce": p.messages(), "rounds_per_allreduce": p.rounds(),
              "step": "trust-region Newton, one all-reduce per gradient and per CG step (d + 1 scalars)",
              **evaluator.info()})


def build_dual_cd(params: DualCDParams, problem):
    from ...deployment import SingleMachineRun
    from .estimator import DualCDSVC

    ds = problem.dataset
    check_problem(ds, 1)
    X, y = as_csr(ds.X), np.asarray(ds.y, np.float64)
    evaluator = Evaluator(X, y, params.C, params.loss, ds.X_test, ds.y_test)

    def fit(on_check, eval_every):
        est = DualCDSVC(C=params.C, loss=params.loss, tol=1e-300, max_iter=10**9, random_state=problem.seed)

        def callback(info):
            m = evaluator.metrics(info["w"], info["alpha"], info["iteration"])
            m["time"] = info["time"]
            return on_check(m)

        est.fit(X, y, callback=callback, check_every=eval_every)
        return {"coef": evaluator.pocket_w.copy(), "intercept": 0.0, "w_last": est.coef_[0], "estimator": est}

    return SingleMachineRun(fit=fit, info={"n": ds.n, "d": ds.d, **evaluator.info()})
