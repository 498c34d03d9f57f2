"""The runs paper 004's methods build from their scenario parameters (`params`; the registry's `build`).

Every method runs K workers (nodes 0..K-1) with one all-reduce per iteration over the `allreduce` pattern (the
layout of `algorithms.allreduce`, shared with paper 001); K = 1 is the paper's single machine. The evaluator (never
metered) computes J at the current w, keeps the best iterate after w_0 (the paper's best-so-far err_t; Theorem 7's
min over t' in [t], notes-004 gotchas 3 and 11) and reports it against the certified J*, with the method's own
certified lower bound.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ...core.metrics import relative_gap
from ...errors import DataError, InfeasibleParameterError
from ...program import RoleSpec
from ...comm.patterns import get_pattern
from ..allreduce import check_pattern_edges, check_problem, declared_scalars, worker_layout
from ..bqo.objective import as_csr
from .objective import band_lower_bound, lipschitz, objective, optimum
from .params import (PROBE_WIDTH, BMRMParams, BundleParams, PegasosNParams, PragamBParams, PragamParams,
                     QPBMRMParams)
from .protocol import (
    DOMAIN_BIAS,
    DOMAIN_BOX,
    DOMAIN_SIMPLEX,
    DOMAIN_SIMPLEX_EQ,
    LS_BMRM,
    PEGASOS_N,
    PRAGAM,
    QP_BMRM,
    extra_scalars,
    probe_plan,
)
from .workers import BundleProgram, bundle_plan

__all__ = ["BMRMParams", "BundleParams", "Evaluator", "PegasosNParams", "PragamBParams", "PragamParams", "QPBMRMParams",
           "build_bundle", "problem_risk"]

#: registry name -> (method, bias)
METHODS = {"pragam": (PRAGAM, False), "pragam-b": (PRAGAM, True), "ls-bmrm": (LS_BMRM, False),
           "qp-bmrm": (QP_BMRM, False), "pegasos-n": (PEGASOS_N, False)}


def problem_risk(ds) -> str:
    return str(ds.meta.get("risk", "hinge"))




class Evaluator:
    """J of an iterate, the best iterate after w_0 (the returned model), and the measures against J* and the
    method's own lower bound. Rows: primal (J at the current w), objective (best J), lower (the method's certified
    lower bound on J*; NaN when it has none), gap = gap_upper - lower (BMRM's eps_t) with gap_upper = the lowest J
    the method evaluated (the best iterate, or w_0), rel_gap = gap / |gap_upper| (`svmsim.core.metrics`;
    gap_lower = lower),
    primal_error = objective - J* (the paper's err_t), rel_primal = primal_error / J* (Pragam-b: the certified
    bound gap / lower, as its problem with a bias has no reference), iterate_gap = J(w_k) - D(beta_k) (Pragam's
    own certificate of its current pair), gap_x_t and iterate_gap_x_k2 (flat under the 1/t and 1/k^2 rates),
    accuracies of the best iterate; with ``band`` (algorithm.band_certificate) also band_gap and rel_band_gap, the
    gap against `band_lower_bound` at the best iterate (certified; its work is the evaluator's, not metered)."""

    def __init__(self, X, y, lam: float, *, risk: str = "hinge", bias: bool = False, X_test=None, y_test=None,
                 band: bool = False, zero_plane: bool = True):
        self.X, self.y, self.lam, self.risk, self.bias, self.band = X, y, float(lam), risk, bias, band
        self.zero_plane = zero_plane
        self.X_test, self.y_test = X_test, y_test
        self.opt = None if bias else optimum(X, y, lam, risk, zero_plane)
        self.best, self.best_w, self.best_b, self.best_iteration = math.inf, np.zeros(X.shape[1]), 0.0, 0
        self.warned_qp = False

    def metrics(self, w: np.ndarray, iteration: int, lower: float = math.nan, iterate_gap: float = math.nan,
                extra: dict | None = None, evaluated: float = math.inf) -> dict:
        j, b = objective(self.X, self.y, w, self.lam, bias=self.bias, risk=self.risk, zero_plane=self.zero_plane)
        if iteration >= 1 and j < self.best:
            self.best, self.best_w, self.best_b, self.best_iteration = j, w.copy(), b, int(iteration)
        best = self.best if iteration >= 1 else j
        if not lower > -math.inf:                     # no lower bound (Pegasos-n) or none yet
            lower = math.nan
        upper = min(best, evaluated)                      # eq. 4: every iterate the method evaluated, w_0 too
        gap = upper - lower
        out = {"iteration": int(iteration), "primal": j, "objective": best, "best_iteration": self.best_iteration,
               "lower": lower, "gap": gap, "rel_gap": relative_gap(upper, lower), "gap_upper": upper,
               "gap_lower": lower,
               "iterate_gap": iterate_gap, "gap_x_t": gap * iteration,
               "iterate_gap_x_k2": iterate_gap * iteration * iteration}
        if self.band and self.risk == "hinge" and not self.bias and iteration >= 1:
            band = max(lower if lower == lower else -math.inf, band_lower_bound(self.X, self.y, self.best_w, self.lam))
            out["band_gap"] = best - band
            out["rel_band_gap"] = (best - band) / abs(best)
        if self.opt is not None:
            out["primal_error"] = best - self.opt.value
            out["rel_primal"] = (best - self.opt.value) / abs(self.opt.value) if self.opt.value else math.nan
        else:                                        # a certified bound: J* >= lower
            out["rel_primal"] = gap / lower if lower > 0 else math.inf
        if self.risk == "hinge":
            out["train_accuracy"] = self._accuracy(self.X, self.y)
            if self.X_test is not None and self.y_test is not None and len(self.y_test):
                out["test_accuracy"] = self._accuracy(self.X_test, self.y_test)
        if extra:
            out.update(extra)
            if extra.get("qp_failures", 0) and not self.warned_qp:
                self.warned_qp = True
                warnings.warn(f"qp-BMRM's inner QP stopped at qp_max_steps without reaching its tolerance "
                              f"({extra['qp_failures']} time(s) so far; last gap {extra.get('qp_gap')}); the lower "
                              "bound stays valid for the planes received (a certificate when no codec encoded "
                              "them), the iterates are inexact: raise algorithm.qp_max_steps",
                              RuntimeWarning, stacklevel=2)
        return out

    def _accuracy(self, X, y) -> float:
        scores = np.asarray(X @ self.best_w).ravel() + self.best_b
        return float(np.mean(np.where(scores > 0, 1.0, -1.0) == y))

    def info(self) -> dict:
        out = {"lam": self.lam, "risk": self.risk, "bias": self.bias}
        if self.opt is not None:
            out.update(J_star=self.opt.value, J_star_rel_uncertainty=self.opt.rel_uncertainty,
                       J_star_source=self.opt.source)
        else:
            out["J_star_source"] = "none (the problem with a bias): rel_primal is the certified bound gap / lower"
        return out


def _check(name: str, params: BundleParams, ds, risk: str, bias: bool) -> None:
    if params.band_certificate and (bias or risk != "hinge"):
        raise InfeasibleParameterError(
            f"band_certificate = true bounds the hinge-loss SVM without a bias from its margin band; {name} "
            f"{'has a bias' if bias else 'runs on the lower-bound instance'}; allowed: band_certificate = false "
            "here, or pragam / ls-bmrm / qp-bmrm on a labelled data set")
    if risk == "max_of_planes":
        if name not in ("pragam", "ls-bmrm", "qp-bmrm"):
            raise InfeasibleParameterError(f"{name} does not run on the lower-bound instance; allowed: pragam, "
                                           "ls-bmrm, qp-bmrm")
        if params.workers != 1:
            raise InfeasibleParameterError(f"the lower-bound instance has {ds.n} planes and one max over them; "
                                           f"workers = {params.workers} is not allowed; allowed: workers = 1")
        return
    if risk != "hinge":
        raise DataError(f"data set '{ds.name}' has risk {risk!r}; allowed: the hinge loss or the "
                        "bmrm_lower_bound instance")
    check_problem(ds, params.workers)
    if not np.any(as_csr(ds.X).data):
        raise DataError(f"every training point of data set '{ds.name}' is zero; there is nothing to separate (and "
                        f"{name}'s bounds divide by the data's scale); allowed: data with a nonzero feature value")


def _probe_plan(params: PragamBParams, layout, main_pattern: str):
    """Pragam-b's root probes over K > 1 workers: the plan of their all-reduce, its links checked."""
    k = params.workers
    pattern = params.probe_allreduce
    if pattern == "auto":
        pattern = "binomial" if get_pattern(main_pattern).min_width(k) > PROBE_WIDTH else main_pattern
    elif get_pattern(pattern).min_width(k) > PROBE_WIDTH:
        raise InfeasibleParameterError(f"probe_allreduce = {pattern!r} splits a probe's {PROBE_WIDTH} scalars over "
                                       f"{k} workers; a {pattern} all-reduce needs a scalar per ring member; "
                                       f"allowed: probe_allreduce = star, tree or binomial, or fewer workers")
    probe = probe_plan(pattern, k, params.branching)
    check_pattern_edges(probe, layout.topology, pattern, "algorithm.probe_allreduce", "pragam-b's root probes: ")
    return probe

def build_bundle(name: str, params: BundleParams, problem):
    from ...deployment import Deployment

    ds = problem.dataset
    method, bias = METHODS[name]
    risk = problem_risk(ds)
    _check(name, params, ds, risk, bias)
    k = params.workers
    X, y = as_csr(ds.X), np.asarray(ds.y, np.float64)
    zero_plane = bool(ds.meta.get("zero_plane", True))
    if risk == "max_of_planes":
        domain, offset = (DOMAIN_SIMPLEX if zero_plane else DOMAIN_SIMPLEX_EQ), 0.0
    else:
        domain, offset = (DOMAIN_BIAS if bias else DOMAIN_BOX), 1.0
    extra = extra_scalars(method)
    layout = worker_layout(problem, k, params.allreduce, ds.d + extra)
    p = bundle_plan(layout.pattern, k, ds.d, method, params.branching)
    layout.check(p)
    L = lipschitz(X, params.lam, getattr(params, "lipschitz_safety", 1e-6)) if method == PRAGAM else math.nan
    probe = _probe_plan(params, layout, layout.pattern) if (bias and k > 1) else None
    program = BundleProgram(p, ds.d, probe=probe, method=method, domain=domain, offset=offset, lam=params.lam, n_total=ds.n,
                            lipschitz=L, project_ball=getattr(params, "project", True),
                            max_bundle=getattr(params, "max_bundle", 1), qp_tol=getattr(params, "qp_tol", 1e-3),
                            qp_max_steps=getattr(params, "qp_max_steps", 100_000))
    roles = [RoleSpec("worker", program, np.arange(k, dtype=np.int64), layout.node_data(X, y))]
    evaluator = Evaluator(X, y, params.lam, risk=risk, bias=bias, X_test=ds.X_test, y_test=ds.y_test,
                          band=params.band_certificate, zero_plane=zero_plane)

    def group(obs):
        return obs["worker"][0]["group"], int(obs["worker"][0]["iteration"][0])

    def evaluate(obs):
        g, it = group(obs)
        extra = {}
        if method == QP_BMRM:
            extra = {"bundle_size": g["bundle_size"], "qp_steps": g["qp_steps"], "qp_gap": g["qp_gap"],
                     "qp_failures": g["qp_failures"], "compactions": g["compactions"]}
        igap = g["j_last"] - g["d_last"] if method == PRAGAM else math.nan
        evaluated = g["j_best"]             # the method's own J of its iterates (w_0 too; an upper bound on J*)
        if probe is not None:
            extra["root_probes"] = g["aux_done"]
        return evaluator.metrics(g["w"], it, lower=g["lower"], iterate_gap=igap, extra=extra, evaluated=evaluated)

    def declared(obs):
        if probe is not None:
            return declared_scalars(p, group(obs)[0]["main_done"], obs["worker"], aux=probe)
        return declared_scalars(p, group(obs)[1], obs["worker"])

    def model(obs):
        return {"coef": evaluator.best_w.copy(), "intercept": evaluator.best_b, "w_last": group(obs)[0]["w"]}

    per = p.scalars()
    info = {"workers": k, "allreduce": layout.pattern, "scalars_per_iteration": per,
            "messages_per_iteration": p.messages(), "rounds_per_iteration": p.rounds(),
            "allreduce_width": ds.d + extra, **evaluator.info()}
    if probe is not None:
        info.update(probe_allreduce=probe.pattern, scalars_per_probe=probe.scalars(), rounds_per_probe=probe.rounds(),
                    probes_per_iteration="two root searches (alpha_mu and v), each a few probes; root_probes counts "
                                         "them")
    if method == PRAGAM:
        info.update(lipschitz=L, lipschitz_source="sigma_max(X)^2 / lam by ARPACK at build time (not metered; a "
                    "distributed power iteration would add about 30 all-reduces of d)")
    return Deployment(roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, comm_unit=("d", float(ds.d)), model=model, info=info)
