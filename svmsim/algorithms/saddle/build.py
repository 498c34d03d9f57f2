"""The runs that saddle-svc and saddle-dsvc build from their scenario parameters (`params`; the registry's `build`)."""
from __future__ import annotations

import math

import numpy as np

from ...numerics.hadamard import next_power_of_two
from ...program import RoleSpec
from .certificate import SaddleEvaluator
from .dsvc import (SaddleClient, SaddleServer, dsvc_bound, dsvc_check_scalars, dsvc_scalars,
                   dsvc_scalars_per_iteration, dsvc_setup_scalars)
from .params import SaddleDSVCParams, SaddleParams
from .preprocess import Rotation, resolve_cap


def _cap_for(params: SaddleParams, y: np.ndarray) -> float:
    return resolve_cap(int((y > 0).sum()), int((y < 0).sum()), params.nu, params.alpha)


def _evaluator(problem, cap: float) -> SaddleEvaluator:
    ds = problem.dataset
    return SaddleEvaluator(ds.X, ds.y, cap, Rotation.from_seed(ds.d, problem.seed), ds.X_test, ds.y_test)


def _svm_model(evaluator: SaddleEvaluator, w: np.ndarray, p: np.ndarray) -> dict:
    v, b, gap = evaluator.model(w)
    if evaluator.cap < 1.0:
        factor = 0.5 * gap / float(v @ v) if gap > 0 else 1.0
    else:
        factor = 2.0 / gap if gap > 0 else 1.0
    return {"w_rotated": w, "coef": factor * v, "intercept": -factor * b, "weights": p}


def build_saddle_svc(params: SaddleParams, problem):
    from ...deployment import SingleMachineRun
    from .estimator import SaddleSVC         # scikit-learn is imported when a solver is built, not to validate

    ds = problem.dataset
    cap = _cap_for(params, ds.y)
    evaluator = _evaluator(problem, cap)

    def fit(on_check, eval_every):
        est = SaddleSVC(nu=params.nu, alpha=params.alpha, eps=params.eps, beta=params.beta, q=params.q,
                        stop="iterations", max_iter=10**12, check_every=eval_every,
                        projection=params.projection, seed=problem.seed)
        eval_set = (ds.X_test, ds.y_test) if ds.X_test is not None else None
        est.fit(ds.X, ds.y, callback=on_check, eval_set=eval_set)
        model = _svm_model(evaluator, est.w_, est.weights_)
        model["estimator"] = est
        return model

    d_pad = next_power_of_two(ds.d)
    return SingleMachineRun(fit=fit, info={"cap": cap, "d_pad": d_pad, "n": ds.n})


def build_saddle_dsvc(params: SaddleDSVCParams, problem):
    from ...deployment import Deployment, server_client_layout

    ds = problem.dataset
    k = params.clients
    layout = server_client_layout(problem, k, "saddle-dsvc")
    cap = _cap_for(params, ds.y)
    parts, G, clients = layout.parts, layout.topology, layout.clients
    X = ds.X
    node_data = [{"X": X[idx], "y": ds.y[idx], "index": idx} for idx in parts]
    server = SaddleServer(ds.d, ds.n, params.eps, params.beta, params.q, cap, params.projection, params.check_every)
    client = SaddleClient(ds.d, params.eps, params.beta, cap, projection=params.projection)
    roles = [RoleSpec("server", server, np.array([0], dtype=np.int64), [{"clients": clients}]),
             RoleSpec("client", client, clients, node_data)]
    evaluator = _evaluator(problem, cap)
    d_pad = next_power_of_two(ds.d)

    def gather(obs):
        p = np.zeros(ds.n)
        w = None
        for o in obs["client"]:
            p[o["index"]] = o["p"]
            w = o["w"] if w is None else w
        return w, p

    def evaluate(obs):
        w, p = gather(obs)
        out = evaluator(w, p)
        out["iteration"] = obs["server"][0]["iteration"]
        out["cap_reports"] = obs["server"][0]["cap_reports"]
        out["beta"] = obs["server"][0]["beta"]
        out["restarts"] = obs["server"][0]["restarts"]
        return out

    def declared(obs):
        srv = obs["server"][0]
        T, R = srv["iteration"], srv["cap_reports"]
        return (dsvc_setup_scalars(k) + dsvc_scalars(k, T, R, cap < math.inf, params.projection)
                + dsvc_check_scalars(k, d_pad, srv["checks"], srv["probes"]))

    def model(obs):
        return _svm_model(evaluator, *gather(obs))

    return Deployment(roles=roles, topology=G, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, bound=lambda eps: dsvc_bound(k, d_pad, eps),
                      comm_unit=("kd", float(k * ds.d)),
                      model=model, info={"k": k, "cap": cap, "d_pad": d_pad, "n": ds.n,
                                         "scalars_per_iteration_hard": dsvc_scalars_per_iteration(k, False)})
