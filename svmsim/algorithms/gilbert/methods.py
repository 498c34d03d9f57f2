"""Gilbert's algorithm for the hard-margin SVM (paper 000's baseline; Gilbert 1966, Gärtner & Jaggi 2009).

Read beside notes-000.md section 4: the nearest point of the Minkowski difference conv(P) - conv(Q) to the origin
is found by Frank-Wolfe steps. With x = p - q the current point:

    s = argmin_{p in P} <x, p> - argmax_{q in Q} <x, q>       (a vertex of the difference; one pass over the data)
    lambda = clip(<x, x - s> / |x - s|^2, 0, 1)               (exact line search)
    x <- (1 - lambda) x + lambda s

|x| is an upper bound on the hull distance and gap(x)/|x| (gap = min_P <x,p> - max_Q <x,q>) a lower bound: the
same certificate as Saddle-SVC's. Each iteration is one matrix-vector product over the whole data (O(nd)).
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ...core.metrics import relative_gap
from ..saddle.certificate import HullDiagnosis, hull_lower_bound
from ..sklearn_api import LinearBinaryClassifier, binary_fit_data
from .params import DGilbertParams, GilbertParams

__all__ = ["GilbertSVC", "GilbertParams"]


def _row(X, i: int) -> np.ndarray:
    """Row i of X as a dense vector (straight from the CSR arrays for sparse X)."""
    if sp.issparse(X):
        out = np.zeros(X.shape[1])
        lo, hi = X.indptr[i], X.indptr[i + 1]
        out[X.indices[lo:hi]] = X.data[lo:hi]
        return out
    return np.asarray(X[i], dtype=np.float64).ravel()


class GilbertSVC(LinearBinaryClassifier):
    """Hard-margin linear SVM by Gilbert's algorithm on the Minkowski difference of the two classes' hulls.

    tol: stop when the certified relative gap (upper - lower)/upper of the hull distance is <= tol.
    max_iter: iteration budget. check_every: iterations between certificate records (the bound itself is free:
    every iteration computes it).

    Fitted attributes: coef_, intercept_ (decision = X @ coef_ + intercept_, canonical hard-margin scaling),
    classes_, hull_distance_, hull_lower_, margin_, rel_gap_, n_iter_, history_.
    """

    ties_to_positive = True

    def __init__(self, tol=1e-3, max_iter=1_000_000, check_every=100):
        self.tol = tol
        self.max_iter = max_iter
        self.check_every = check_every

    def fit(self, X, y, callback=None, eval_set=None):
        if not (isinstance(self.tol, (int, float)) and self.tol >= 0):
            raise ValueError(f"tol = {self.tol!r}; allowed: a number >= 0")
        for name in ("max_iter", "check_every"):
            value = getattr(self, name)
            if not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"{name} = {value!r}; allowed: an integer >= 1")
        t_start = time.perf_counter()
        X, classes, ypm = binary_fit_data(self, X, y)
        diagnosis = HullDiagnosis(X, ypm, math.inf)
        pos, neg = np.flatnonzero(ypm > 0), np.flatnonzero(ypm < 0)
        Xp, Xq = X[pos], X[neg]
        if sp.issparse(X):
            Xp, Xq = sp.csr_matrix(Xp), sp.csr_matrix(Xq)
        x = _row(Xp, 0) - _row(Xq, 0)                 # start: the difference of a pair
        history = []
        self.stop_reason_ = "iteration budget"
        it = 0
        upper = lower = gap = math.nan
        lo_p = hi_q = 0.0
        while True:
            proj_p = np.asarray(Xp @ x).ravel()
            proj_q = np.asarray(Xq @ x).ravel()
            ip, iq = int(np.argmin(proj_p)), int(np.argmax(proj_q))
            lo_p, hi_q = float(proj_p[ip]), float(proj_q[iq])
            xx = float(x @ x)
            upper = math.sqrt(xx)
            gap = lo_p - hi_q                          # <x, s> for the chosen vertex s
            lower = max(gap, 0.0) / upper if upper > 0 else 0.0
            rel = relative_gap(upper, lower)
            if it % self.check_every == 0 or rel <= self.tol or it >= self.max_iter:
                info = {"iteration": it, "hull_distance": upper, "hull_lower": lower, "margin": 0.5 * lower,
                        "rel_gap": rel, "gap_upper": upper, "gap_lower": lower, "objective": upper,
                        "duality_gap": upper - lower,
                        "time": time.perf_counter() - t_start}
                b = 0.5 * (lo_p + hi_q)
                info["train_accuracy"] = float((np.count_nonzero(proj_p >= b) + np.count_nonzero(proj_q < b))
                                               / ypm.shape[0])
                if eval_set is not None:
                    st = np.asarray(eval_set[0] @ x).ravel() - b
                    yt = np.where(np.asarray(eval_set[1]) == classes[1], 1.0, -1.0)
                    info["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == yt))
                why = diagnosis.update(lower)
                if why:
                    info["diagnosis"] = why
                history.append(info)
                if callback is not None and callback(info):
                    self.stop_reason_ = "callback"
                    break
                if why:
                    self.stop_reason_ = why
                    break
            if rel <= self.tol:
                self.stop_reason_ = "certified gap"
                break
            if it >= self.max_iter:
                break
            s = _row(Xp, ip) - _row(Xq, iq)
            diff = x - s
            dd = float(diff @ diff)
            if dd <= 0.0:
                break
            lam = min(1.0, max(0.0, (xx - float(x @ s)) / dd))
            x = (1.0 - lam) * x + lam * s
            it += 1
        self.classes_ = classes
        self.n_iter_ = it
        self.history_ = history
        self.hull_distance_, self.hull_lower_, self.margin_ = upper, lower, 0.5 * lower
        self.rel_gap_ = relative_gap(upper, lower)
        factor = 2.0 / gap if gap > 0 else 1.0       # canonical scaling: min y (w.x - b) = 1
        self.coef_ = (factor * x).reshape(1, -1)
        self.intercept_ = np.array([-factor * 0.5 * (lo_p + hi_q)])
        self.fit_time_ = time.perf_counter() - t_start
        if self.stop_reason_ not in ("certified gap", "callback"):
            warnings.warn(f"GilbertSVC stopped without reaching its target (relative gap {self.rel_gap_:.3g}, asked "
                          f"{self.tol:g}): {self.stop_reason_}", ConvergenceWarning, stacklevel=2)
        return self


def build_gilbert(params: GilbertParams, problem):
    from ...deployment import SingleMachineRun

    ds = problem.dataset

    def fit(on_check, eval_every):
        est = GilbertSVC(tol=0.0, max_iter=10**12, check_every=eval_every)
        eval_set = (ds.X_test, ds.y_test) if ds.X_test is not None else None
        est.fit(ds.X, ds.y, callback=on_check, eval_set=eval_set)
        return {"coef": est.coef_[0], "intercept": float(est.intercept_[0]), "estimator": est}

    return SingleMachineRun(fit=fit, info={"n": ds.n, "d": ds.d})


# ---------------------------------------------------------------------------------------------------------------
# Distributed Gilbert (Liu et al. 2016, as paper 000 and notes-000 section 4 describe it): one server, k clients
# ---------------------------------------------------------------------------------------------------------------
#
# Per iteration (every scalar counted; d is the data's own dimension):
#   server -> every client  "point"    [x]                          k*d
#   client -> server        "extremes" [min_P <x,p>, max_Q <x,q>]   2k   (+inf / -inf for a class it lacks)
#   server -> 2 clients     "request_p", "request_q" [iteration]     2    (to the holders of the extremes)
#   client -> server        "vertex_p", "vertex_q"   [the point]     2d
# Iteration 0 broadcasts x = 0 and takes the first vertices found as x = p - q.

from dataclasses import dataclass  # noqa: E402

from ...comm.message import MessageBatch, Outbox, frozen_ids  # noqa: E402
from ...program import NodeProgram, RoleSpec  # noqa: E402


def dgilbert_scalars_per_iteration(k: int, d: int) -> int:
    """Scalars one distributed Gilbert iteration sends: k*d + 2k + 2 + 2d (about one unit of k*d)."""
    return k * d + 2 * k + 2 + 2 * d


@dataclass
class _GServer:
    clients: np.ndarray
    x: np.ndarray
    iteration: int = 0
    extremes: np.ndarray | None = None
    vertex_p: np.ndarray | None = None
    vertex_q: np.ndarray | None = None
    phase: str = "point"


class GilbertServer(NodeProgram):
    role = "server"
    initiator = True

    def __init__(self, d: int):
        self.d = d

    def init(self, node_ids, node_data, seed):
        return _GServer(frozen_ids(node_data[0]["clients"]), np.zeros(self.d))

    def step(self, st: _GServer, inbox, round_):
        out = Outbox()
        if "extremes" in inbox:
            b = inbox["extremes"]
            rows = b.payload
            ip, iq = int(np.argmin(rows[:, 0])), int(np.argmax(rows[:, 1]))
            st.extremes = (float(rows[ip, 0]), float(rows[iq, 1]))
            tag = np.array([st.iteration], dtype=np.int64)
            out.send(MessageBatch.single("request_p", 0, int(b.src[ip]), tag))
            out.send(MessageBatch.single("request_q", 0, int(b.src[iq]), tag))
            st.phase = "vertex"
        elif "vertex_p" in inbox:
            s = inbox["vertex_p"].row(0) - inbox["vertex_q"].row(0)
            x = st.x
            if st.iteration == 0:
                st.x = s.copy()
            else:
                diff = x - s
                dd = float(diff @ diff)
                lam = min(1.0, max(0.0, (float(x @ x) - float(x @ s)) / dd)) if dd > 0 else 0.0
                st.x = (1.0 - lam) * x + lam * s
            st.iteration += 1
            st.phase = "point"
            out.signals = {"iteration": st.iteration, "wake": True}
        elif st.phase == "point":
            out.send(MessageBatch.broadcast("point", 0, st.clients, st.x))
            st.phase = "extremes"
        return st, out

    def observe(self, st: _GServer):
        return {"x": st.x.copy(), "iteration": st.iteration}


@dataclass
class _GClient:
    node_ids: np.ndarray
    parts: list          # per client: (X_pos, X_neg) as CSR or dense
    x: np.ndarray | None = None


class GilbertClient(NodeProgram):
    role = "client"

    def init(self, node_ids, node_data, seed):
        parts = []
        for data in node_data:
            X, y = data["X"], np.asarray(data["y"])
            parts.append((X[y > 0], X[y < 0]))
        return _GClient(frozen_ids(node_ids), parts)

    def step(self, st: _GClient, inbox, round_):
        out = Outbox()
        if "point" in inbox:
            x = st.x = inbox["point"].row(0)
            rows = np.empty((len(st.parts), 2))
            for c, (Xp, Xq) in enumerate(st.parts):        # one matrix-vector product per client shard
                rows[c, 0] = np.min(Xp @ x) if Xp.shape[0] else np.inf
                rows[c, 1] = np.max(Xq @ x) if Xq.shape[0] else -np.inf
            out.send(MessageBatch.gather("extremes", st.node_ids, 0, rows))
        pos = None
        for tag, side, pick in (("request_p", 0, np.argmin), ("request_q", 1, np.argmax)):
            if tag in inbox:
                pos = pos or {int(n): i for i, n in enumerate(st.node_ids)}
                node = int(inbox[tag].dst[0])
                X = st.parts[pos[node]][side]
                v = _row(X, int(pick(np.asarray(X @ st.x).ravel())))
                out.send(MessageBatch.single("vertex_" + tag[-1], node, 0, v))
        return st, out


def certificate(X, y: np.ndarray, x: np.ndarray, X_test=None, y_test=None) -> dict:
    """Hull-distance bounds of a point x of the Minkowski difference, and the accuracies of its bisector."""
    proj = np.asarray(X @ x).ravel()
    gap, b = hull_lower_bound(X, y, x, math.inf, proj)
    upper = float(np.linalg.norm(x))
    lower = max(gap, 0.0) / upper if upper > 0 else 0.0
    out = {"hull_distance": upper, "hull_lower": lower, "margin": 0.5 * lower, "objective": upper,
           "rel_gap": relative_gap(upper, lower), "gap_upper": upper, "gap_lower": lower,
           "duality_gap": upper - lower,
           "train_accuracy": float(np.mean(np.where(proj >= b, 1.0, -1.0) == y))}
    if X_test is not None and y_test is not None and len(y_test):
        st = np.asarray(X_test @ x).ravel() - b
        out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == y_test))
    return out


def build_dgilbert(params: DGilbertParams, problem):
    from ...deployment import Deployment, server_client_layout

    ds = problem.dataset
    k = params.clients
    layout = server_client_layout(problem, k, "dgilbert")
    parts, G, clients = layout.parts, layout.topology, layout.clients
    roles = [RoleSpec("server", GilbertServer(ds.d), np.array([0], dtype=np.int64), [{"clients": clients}]),
             RoleSpec("client", GilbertClient(), clients,
                      [{"X": ds.X[idx], "y": ds.y[idx]} for idx in parts])]

    diagnosis = HullDiagnosis(ds.X, ds.y, math.inf)

    def evaluate(obs):
        srv = obs["server"][0]
        out = certificate(ds.X, ds.y, srv["x"], ds.X_test, ds.y_test)
        out["iteration"] = srv["iteration"]
        why = diagnosis.update(out["hull_lower"])
        if why:
            out["diagnosis"] = why
        return out

    def declared(obs):
        return obs["server"][0]["iteration"] * dgilbert_scalars_per_iteration(k, ds.d)

    def model(obs):
        x = obs["server"][0]["x"]
        gap, b = hull_lower_bound(ds.X, ds.y, x, math.inf)
        factor = 2.0 / gap if gap > 0 else 1.0          # canonical scaling: min y (w.x - b) = 1
        return {"coef": factor * x, "intercept": -factor * b, "hull_distance": float(np.linalg.norm(x))}

    return Deployment(roles=roles, topology=G, node_names=layout.node_names, evaluate=evaluate, declared_scalars=declared,
                      bound=lambda eps: {"upper": k * ds.d / eps, "lower": k * min(ds.d, 1.0 / eps)},
                      comm_unit=("kd", float(k * ds.d)), model=model,
                      info={"k": k, "scalars_per_iteration": dgilbert_scalars_per_iteration(k, ds.d)})
