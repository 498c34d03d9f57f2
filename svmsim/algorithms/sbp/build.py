"""Scenario parameters of paper 003's single-machine methods and the runs they build (the registry's `build`).

Every evaluation point reports the method's own count of kernel evaluations (`kernel_evaluations`: training rows and
the diagonal, counted where they are computed, `numerics.kernels`), the same in d-dimensional inner products
(`inner_products`), the test error of the model the method would return (SBP: the averaged iterate, rescaled by its
level; the others: the current iterate, notes-003 gotcha 8), and the objective (2.2) of that model,
lam/2 ||w||^2 + mean hinge, against the certified no-bias reference when one was computed (`nu = "auto"`).
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...core.streams import STREAM_PROGRAM, stream_keys
from ...deployment import SingleMachineRun
from ...errors import InfeasibleParameterError
from ..stall import ObjectiveSettle
from .kernel_problem import KernelProblem, evaluation_points
from .methods import (
    PEGASOS,
    PERCEPTRON,
    SDCA,
    baseline_iterations,
    baseline_scalars,
    sbp_iterations,
    sbp_scalars,
)
from .params import PegasosParams, PerceptronParams, SBPParams, SDCAParams
from .reference import NoBiasSolution, nu_from_lambda
from .responses import Responses, coef_total, renormalise, responses
from .water import water_level_bias, water_level_sorted

__all__ = [
    "PegasosParams",
    "PerceptronParams",
    "SBPParams",
    "SDCAParams",
    "averaged_model",
    "build_baseline",
    "build_sbp",
    "model_metrics",
    "resolve_nu",
    "settle_rule",
    "settled_row",
]


def resolve_nu(nu, kp: KernelProblem, seed: int = 0) -> tuple[float, NoBiasSolution | None]:
    """(nu, the certified reference it came from or None)."""
    if nu == "auto":
        ref = nu_from_lambda(kp.data, kp.kernel, kp.y, kp.lam, seed=seed)
        return ref.nu, ref
    nu = float(nu)
    if not (0.0 <= nu <= 1.0):
        raise InfeasibleParameterError(f"nu = {nu!r} is not allowed; allowed: a number in [0, 1] (the slack "
                                       "budget of (2.3), e.g. 1.10e-2 for a9a) or 'auto'")
    return nu, None


def averaged_model(R: Responses, iterations: int, volume: float, bias: bool):
    """SBP's output (Algorithm 1's last lines): the averaged iterate's coefficients, training and test responses
    (c is linear in w, so they are the sums over T), its level gamma-bar = f(w-bar) and bias; the returned model is
    w-bar / gamma-bar (Lemma 2.1; only when gamma-bar > 0, notes-003 gotcha 7)."""
    T = max(iterations, 1)
    coef, c, test = coef_total(R) / T, R.c_sum / T, R.test_sum / T
    if bias:
        level, b, _, _, _ = water_level_bias(c, R.y, volume)
    else:
        level, _ = water_level_sorted(c, volume)
        b = 0.0
    return coef, c, test, float(level), float(b)


def model_metrics(kp: KernelProblem, coef: np.ndarray, c: np.ndarray, test: np.ndarray | None, b: float,
                  divide: float, reference: NoBiasSolution | None) -> dict:
    """Objective (2.2) and accuracies of w = sum coef_j y_j Phi_j / divide + b / divide."""
    w2 = max(float(coef @ c), 0.0) / (divide * divide)
    margins = (c + kp.y * b) / divide
    hinge = float(np.maximum(0.0, 1.0 - margins).mean())
    objective = 0.5 * kp.lam * w2 + hinge
    out = {"objective": objective, "norm": math.sqrt(w2), "hinge": hinge,
           "train_accuracy": float(np.mean(margins > 0)), "support": int(np.count_nonzero(coef))}
    if reference is not None:
        best = float(kp.lam * reference.primal)
        out["primal_error"] = objective - best
        out["rel_primal"] = (objective - best) / best
    if test is not None and kp.y_test is not None:
        acc = kp.accuracy(test + b, kp.y_test)
        out["test_accuracy"] = acc
        out["test_error"] = 1.0 - acc
    return out


def _counts(R: Responses) -> dict:
    e = int(R.evaluations.sum())
    return {"kernel_evaluations": e, "inner_products": e, "evaluator_kernel_evaluations": int(R.test_evaluations[0])}


def settle_rule(params) -> ObjectiveSettle | None:
    """The method's settling rule (`params.settle`; None when 0 or when the method has none)."""
    return ObjectiveSettle(params.settle) if getattr(params, "settle", 0) > 0 else None


def settled_row(settle: ObjectiveSettle | None, m: dict) -> dict:
    """The row `m`, with a ``diagnosis`` (the runner stops on it and gives it as the stop reason) once the
    objective has settled."""
    why = settle.update(m["iteration"], m["objective"]) if settle is not None else None
    if why:
        m["diagnosis"] = why
    return m


class _Run(SingleMachineRun):
    def total(self, kp: KernelProblem) -> int:
        """The iterations to run: the epochs, or the runner's budget when it is smaller."""
        return kp.iterations if self.budget is None else max(1, min(kp.iterations, int(self.budget)))


def build_sbp(params: SBPParams, problem):
    kp = KernelProblem(params, problem.dataset)
    if params.bias and (kp.y > 0).all() or params.bias and (kp.y < 0).all():
        raise InfeasibleParameterError("sbp with bias = true needs both classes in the training set")
    nu, ref = resolve_nu(params.nu, kp, problem.seed)
    key = stream_keys(problem.seed, STREAM_PROGRAM, 1)[0]

    settle = settle_rule(params)

    def fit(on_check, eval_every):
        R = responses(kp.data, kp.kernel, kp.y, kp.test, averaged=True)
        S = sbp_scalars(R.kdiag, kp.y, nu, params.bias, key)
        work = np.empty(kp.n)
        done = 0
        elapsed = 0.0
        for target in evaluation_points(run.total(kp), kp.eval_points):
            t0 = time.perf_counter()
            sbp_iterations(R, S, int(target - done), work)
            elapsed += time.perf_counter() - t0
            done = int(target)
            coef, c, test, level, b = averaged_model(R, done, S.volume, params.bias)
            divide = level if level > 0 else 1.0
            m = {"iteration": done, "epochs": done / kp.n, **_counts(R), "level": level,
                 "level_positive": level > 0, "solver_time": elapsed, "water_passes_per_iteration":
                 int(S.passes[0]) / max(done, 1),
                 **model_metrics(kp, coef, c, test if kp.test is not None else None, b, divide, ref)}
            if on_check(settled_row(settle, m)):
                break
        coef, c, _, level, b = averaged_model(R, done, S.volume, params.bias)
        divide = level if level > 0 else 1.0
        return {"dual_coef": coef / divide, "intercept": b / divide, "level": level, "nu": nu}

    info = {**kp.info(), "nu": nu, "volume": kp.n * nu, "bias": params.bias,
            "nu_source": "given" if ref is None else "auto: certified no-bias reference",
            "evaluation_points": "log-spaced in iterations"}
    if ref is not None:
        info.update(reference_primal=kp.lam * ref.primal, reference_gap=kp.lam * ref.gap,
                    reference_norm=ref.norm, reference_hinge=ref.hinge,
                    reference_kernel_evaluations=ref.evaluations)
    run = _Run(fit=fit, info=info)
    return run


_BASELINES = {"kernel-pegasos": PEGASOS, "kernel-perceptron": PERCEPTRON, "kernel-sdca": SDCA}


def build_baseline(name: str, params, problem):
    kp = KernelProblem(params, problem.dataset)
    method = _BASELINES[name]
    key = stream_keys(problem.seed, STREAM_PROGRAM, 1)[0]

    settle = settle_rule(params)

    def fit(on_check, eval_every):
        R = responses(kp.data, kp.kernel, kp.y, kp.test)
        S = baseline_scalars(method, kp.n, kp.lam, getattr(params, "project", True), key)
        done = 0
        elapsed = 0.0
        for target in evaluation_points(run.total(kp), kp.eval_points):
            t0 = time.perf_counter()
            baseline_iterations(R, S, int(target - done))
            elapsed += time.perf_counter() - t0
            done = int(target)
            renormalise(R)
            test = R.test_c if kp.test is not None else None
            m = {"iteration": done, "epochs": done / kp.n, **_counts(R), "updates": int(S.updates[0]),
                 "solver_time": elapsed, **model_metrics(kp, R.coef, R.c, test, 0.0, 1.0, None)}
            if on_check(settled_row(settle, m)):
                break
        renormalise(R)
        return {"dual_coef": R.coef.copy(), "intercept": 0.0}

    run = _Run(fit=fit, info=kp.info())
    return run
