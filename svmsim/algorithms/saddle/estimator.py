"""Saddle-SVC as a scikit-learn estimator (paper 000, Algorithms 1-2): the single machine runs the compiled
iterations of `single.run_iterations` in blocks and checks a certificate between blocks."""
from __future__ import annotations

import math
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ...core.metrics import relative_gap
from ...errors import DataError
from ..sklearn_api import LinearBinaryClassifier, binary_fit_data
from . import single
from .certificate import SaddleEvaluator, capped_min
from .preprocess import (U_REFRESH_EVERY, CoordinateStream, Rotation, q_value, row_norms, resolve_cap,
                         saddle_constants)
from .restarts import StallWatch, lower_beta


class SaddleSVC(LinearBinaryClassifier):
    """Saddle-SVC (paper 000, Algorithms 1-2): hard-margin SVM or nu-SVM by randomized primal-dual saddle steps.

    Parameters
    ----------
    nu: weight cap of the nu-SVM (this paper's nu, in [1/min(n1,n2), 1]); None with alpha None = hard margin.
    alpha: alternative to nu: nu = 1/(alpha*min(n1,n2)) (the paper uses alpha = 0.85).
    eps, beta: accuracy and the paper's beta; they set gamma = eps*beta/(2 ln n) and the step sizes. Lemma 3
        needs beta <= OPT, which nobody knows before solving; beta = "auto" (the default) starts at 1 and, when the
        certified gap stalls where the smoothing can hold it, restarts from the current iterate with a smaller
        beta read off the certificate (see `_lower_beta`; never below the certified L^2/2 <= OPT). A number
        fixes beta for the whole run, as the paper does.
    q: "data" (sqrt(d)*max|X_ij| after rotation), "log" (sqrt(ln n)) or a number.
    tol: stop when the certified relative gap (upper-lower)/upper of the hull distance is <= tol.
    stop: "gap" (certified, default), "paper" (every T iterations, stop when the objective moved less than
        eps; section 5) or "iterations" (run max_iter).
    max_iter: iteration budget. check_every: iterations between certificate checks (default: T, at least 250).
    projection: "newton" (exact KL projection, warm-started; same output as the rules), "rule3" (the paper's
        while loop from c = 1), "sort" (Rule 2, O(n log n) per projection).
    seed: seeds D and the coordinate stream (Saddle-DSVC with the same seed follows the same iterates).

    Fitted attributes: coef_, intercept_ (sklearn convention: decision = X @ coef_ + intercept_), classes_,
    hull_distance_, hull_lower_, margin_, rel_gap_, objective_, n_iter_, history_, w_ (rotated iterate),
    weights_ (eta and xi in the training order), constants_, beta_ (the last beta), restarts_, stop_reason_.
    A fit that stops short of its target (budget; intersecting hulls, found by an LP) warns ConvergenceWarning.
    """

    ties_to_positive = True          # predict sign(<v, x> - b) with sign(0) = +1 (the paper's convention)

    def __init__(self, nu=None, alpha=None, eps=1e-3, beta="auto", q="data", tol=1e-3, stop="gap",
                 max_iter=1_000_000, check_every=None, projection="newton", seed=0, refresh_every=U_REFRESH_EVERY):
        self.nu = nu
        self.alpha = alpha
        self.eps = eps
        self.beta = beta
        self.q = q
        self.tol = tol
        self.stop = stop
        self.max_iter = max_iter
        self.check_every = check_every
        self.projection = projection
        self.seed = seed
        self.refresh_every = refresh_every

    # -- preparation ---------------------------------------------------------------------------------------------
    def _prepare(self, X, ypm):
        pos = np.flatnonzero(ypm > 0)
        neg = np.flatnonzero(ypm < 0)
        cap = resolve_cap(pos.size, neg.size, self.nu, self.alpha)
        rot = Rotation.from_seed(X.shape[1], self.seed)
        order = np.concatenate([pos, neg])
        scale = float(row_norms(X).max())
        if not scale > 0:
            raise DataError("every training point is zero; there is nothing to separate")
        S = rot.rotate_columns(X, order, ypm[order] / scale)
        q = q_value(self.q, rot.d_pad, order.size, float(np.abs(S).max()))
        return order, S, rot, scale, cap, q, pos.size

    def fit(self, X, y, callback=None, eval_set=None):
        """Fit on X (dense or sparse, n x d) and binary labels y.

        callback: ``callback(info: dict) -> bool`` is called at every check with the certificate; True stops.
        eval_set: optional (X_test, y_test) whose accuracy is added to every check record.
        """
        self._check_params()
        t_start = time.perf_counter()
        X, classes, ypm = binary_fit_data(self, X, y)
        order, S, rot, scale, cap, q, n1 = self._prepare(X, ypm)
        n = order.size
        d = rot.d_pad
        seg_lo = np.array([0, n1], dtype=np.int64)
        seg_hi = np.array([n1, n], dtype=np.int64)
        auto = isinstance(self.beta, str)
        beta = 1.0 if auto else float(self.beta)      # "auto" starts at the paper's scale (OPT <= 2 in the ball)
        const = saddle_constants(d, n, self.eps, beta, q)
        evaluator = SaddleEvaluator(X, ypm, cap, rot)
        if eval_set is not None:
            evaluator.X_test = eval_set[0]
            evaluator.y_test = np.where(np.asarray(eval_set[1]) == classes[1], 1.0, -1.0)
        counts = np.array([n1, n - n1], dtype=np.float64)
        # state (Algorithm 1 line 5): w = 0, eta = 1/n1, xi = 1/n2 (log domain, lazily normalised)
        Lr = np.concatenate([np.full(n1, -math.log(n1)), np.full(n - n1, -math.log(n - n1))])
        st = single.SolverState(
            w=np.zeros(d), u=np.zeros(n), Lr=Lr, pr=np.exp(Lr), off=np.zeros(2), mult=np.ones(2),
            shift=const.kappa * (-np.log(counts)) / (const.gamma + const.kappa) + np.log(counts), c=np.ones(2))
        w, u, pr = st.w, st.u, st.pr
        coords = CoordinateStream(d, self.seed)
        first = coords.peek(1)[0]
        delta = float(S[first, :n1].sum() / n1 + S[first, n1:].sum() / (n - n1))
        T = const.iterations_estimate()
        check = int(self.check_every or max(250, min(T, 5000)))
        mode = {"newton": 0, "rule3": 1, "sort": 2}[self.projection]
        prm = single.SolverParams(sigma=const.sigma, kappa=const.kappa, gamma=const.gamma, theta=const.theta,
                                  cap=float(cap), max_passes=n + 2, mode=mode)
        history = []
        prev_obj = None
        t_iter = 0.0
        done = 0
        since_refresh = 0
        restarts = 0
        watch = StallWatch()
        self.stop_reason_ = "iteration budget"
        while done < self.max_iter:
            m = min(check, self.max_iter - done)
            block = coords.peek(m + 1)
            coords.take(m)
            t0 = time.perf_counter()
            delta = single.run_iterations(S, st, seg_lo, seg_hi, block, m, delta, prm)
            t_iter += time.perf_counter() - t0
            done += m
            since_refresh += m
            if since_refresh >= self.refresh_every:
                u[:] = w @ S                        # remove the drift of the one-coordinate updates
                since_refresh = 0
            info = self._certificate(S, w, u, pr, st.mult, n1, cap, scale, evaluator)
            info.update(iteration=done, time=time.perf_counter() - t_start, iteration_time=t_iter, beta=beta)
            why = evaluator.diagnose(info["hull_lower"])
            if why:
                info["diagnosis"] = why
            history.append(info)
            watch.add(done, info["rel_gap"])
            if callback is not None and callback(info):
                self.stop_reason_ = "callback"
                break
            if why and self.stop != "iterations":
                self.stop_reason_ = why
                break
            if self.stop == "gap" and info["rel_gap"] <= self.tol:
                self.stop_reason_ = "certified gap"
                break
            new_beta = self._lower_beta(beta, info, scale) if auto and watch.stalled(2 * T) else None
            if new_beta is not None:
                # the certified gap stalled where the smoothing could hold it: restart from the current (w, p)
                beta = new_beta
                watch.restart(done)
                const = saddle_constants(d, n, self.eps, beta, q)
                prm = prm._replace(sigma=const.sigma, kappa=const.kappa, gamma=const.gamma, theta=const.theta)
                T = const.iterations_estimate()
                p_now = np.concatenate([np.minimum(cap, st.mult[0] * pr[:n1]), np.minimum(cap, st.mult[1] * pr[n1:])])
                delta = float(S[coords.peek(1)[0]] @ p_now)         # no momentum: eta[t-1] = eta[t]
                restarts += 1
            if self.stop == "paper" and done % T < check:
                if prev_obj is not None and abs(info["objective"] - prev_obj) < self.eps:
                    self.stop_reason_ = "objective change below eps"
                    break
                prev_obj = info["objective"]
        # fitted attributes
        p = self._weights(pr, st.mult, seg_lo, seg_hi, cap, order)
        v, b, gap = evaluator.model(w)
        self.classes_ = classes
        self.w_ = w
        self.weights_ = p
        self.rotation_ = rot
        self.scale_ = scale
        self.cap_ = cap
        self.constants_ = const
        self.n_iter_ = done
        self.beta_ = beta
        self.restarts_ = restarts
        self.history_ = history
        last = history[-1] if history else self._certificate(S, w, u, pr, st.mult, n1, cap, scale, evaluator)
        self.hull_distance_ = last["hull_distance"]
        self.hull_lower_ = last["hull_lower"]
        self.margin_ = last["margin"]
        self.rel_gap_ = last["rel_gap"]
        self.objective_ = last["objective"]
        self.iteration_time_ = t_iter
        self.fit_time_ = time.perf_counter() - t_start
        if cap < 1.0:
            # problem (5) with w_svm = (best scale) * v/|v|: w_svm = gap/2 * v/|v|^2 (notes section 1)
            factor = 0.5 * gap / float(v @ v) if gap > 0 else 1.0
        else:
            # hard margin in the scaling of (1): min y (w.x - b) = 1
            factor = 2.0 / gap if gap > 0 else 1.0
        self.coef_ = (factor * v).reshape(1, -1)
        self.intercept_ = np.array([-factor * b])
        if self.stop_reason_ not in ("certified gap", "objective change below eps", "callback") \
                and self.stop != "iterations":
            warnings.warn(f"SaddleSVC stopped without reaching its target (relative gap {self.rel_gap_:.3g}, asked "
                          f"{self.tol:g}): {self.stop_reason_}", ConvergenceWarning, stacklevel=2)
        return self

    def _lower_beta(self, beta: float, info: dict, scale: float) -> float | None:
        """beta = "auto": the beta to restart with when the certificate has stalled at `beta`, or None when the
        stall is not beta's doing (`restarts.lower_beta`, aiming at `tol`)."""
        return lower_beta(beta, info, scale, self.eps, self.tol)

    def _check_params(self):
        if self.stop not in ("gap", "paper", "iterations"):
            raise ValueError(f"stop = {self.stop!r}; allowed: 'gap', 'paper', 'iterations'")
        if self.projection not in ("newton", "rule3", "sort"):
            raise ValueError(f"projection = {self.projection!r}; allowed: 'newton', 'rule3', 'sort'")
        if isinstance(self.beta, str) and self.beta != "auto":
            raise ValueError(f"beta = {self.beta!r}; allowed: 'auto' or a number > 0")
        for name, value, lo, hi in (("eps", self.eps, 0.0, 1.0), ("tol", self.tol, 0.0, math.inf),
                                    ("beta", 1.0 if self.beta == "auto" else self.beta, 0.0, math.inf)):
            if not (isinstance(value, (int, float)) and lo < value < hi):
                raise ValueError(f"{name} = {value!r}; allowed: a number in ({lo:g}, {hi:g})")
        for name, value in (("max_iter", self.max_iter), ("refresh_every", self.refresh_every),
                            ("check_every", 1 if self.check_every is None else self.check_every)):
            if not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"{name} = {value!r}; allowed: an integer >= 1" +
                                 (" or None (the paper's T, at least 250)" if name == "check_every" else ""))

    @staticmethod
    def _certificate(S, w, u, pr, cls_mult, n1, cap, scale, evaluator) -> dict:
        """The same certificate as `SaddleEvaluator`, from the solver's own state: the lower bound and the
        offset from the maintained projections u = S^T w (no pass over the data), the upper bound |S p|
        (the rotation keeps norms). Distances in the data's units (times the scale s)."""
        p = np.concatenate([np.minimum(cap, cls_mult[0] * pr[:n1]), np.minimum(cap, cls_mult[1] * pr[n1:])])
        upper = scale * float(np.linalg.norm(S @ p))
        lo_p = capped_min(u[:n1], cap)                 # capmin over +1 of <w, x'>
        lo_q = capped_min(u[n1:], cap)                 # capmin over -1 of -<w, x'>
        v = evaluator.rotation.to_original(w)          # the direction in the data's own coordinates: padding
        wn = float(np.linalg.norm(v))                  # dimensions of w carry no signal and are left out
        gap_u = lo_p + lo_q
        lower = scale * max(gap_u, 0.0) / wn if wn > 0 else 0.0
        b = 0.5 * (lo_p - lo_q)                        # predict sign(<w, x'> - b)
        out = {"hull_distance": upper, "hull_lower": lower, "margin": 0.5 * lower,
               "rel_gap": relative_gap(upper, lower), "gap_upper": upper, "gap_lower": lower,
               "w_norm": float(np.linalg.norm(w))}
        if cap < 1.0:
            out["objective"] = -lower * lower / 8.0
            out["dual_objective"] = -upper * upper / 8.0
            out["duality_gap"] = (upper * upper - lower * lower) / 8.0
        else:
            out["objective"] = upper
            out["duality_gap"] = upper - lower
        correct = np.count_nonzero(u[:n1] >= b) + np.count_nonzero(u[n1:] >= -b)
        out["train_accuracy"] = correct / u.shape[0]
        if evaluator.X_test is not None and evaluator.y_test is not None and len(evaluator.y_test):
            st = np.asarray(evaluator.X_test @ (v / scale)).ravel() - b
            out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == evaluator.y_test))
        return out

    @staticmethod
    def _weights(pr, cls_mult, seg_lo, seg_hi, cap, order):
        p_sorted = np.empty_like(pr)
        for c in range(2):
            sl = slice(seg_lo[c], seg_hi[c])
            p_sorted[sl] = np.minimum(cap, cls_mult[c] * pr[sl])
        p = np.empty_like(pr)
        p[order] = p_sorted
        return p

