"""Paper 004's methods as one compiled worker step: K workers hold blocks of the examples (rows) and a replicated
w; every iteration is a local part, one all-reduce of a d-vector and a few scalars, and the same update on every
worker (notes-004 section 6, marked there as an extrapolation: the paper is single-machine).

The objective is J(w) = lam/2 ||w||^2 + R(w) with R(w) = max_{alpha in Q2} <alpha, b - M w>, where row i of M is
y_i x_i (the rows of the group's CSR shards times their signs) and b_i = `offset`:

    hinge (eq. 2, no bias)   b = 1, Q2 = [0, 1/n]^n               R = 1/n sum_i max(0, 1 - y_i <x_i, w>)
    hinge with bias (Pragam-b, section 4)   Q2 = box and y^T alpha = 0   (J's bias minimised out)
    lower-bound instance (section 3, corrected: notes-004 section 2.2 fix 2)   rows -a_i, b = 0,
        Q2 = {alpha >= 0, sum alpha <= 1}                         R = max(0, max_i <a_i, w>)
      and fix 1 (no zero plane): Q2 = the simplex sum alpha = 1     R = max_i <a_i, w>

Per iteration (scores z_i = y_i <x_i, w> are kept per row; every method does two sparse matvecs):

    PRAGAM     (Algorithm 1, eqs. 23-25; notes-004 section 3.4's two-matvec loop)
        local      tau = 2/(k+3);  beta = (1 - tau) alpha + tau Proj((b - z)/mu)         alpha_mu(w_k), eq. (23)
        all-reduce [sum_i beta_i y_i x_i, R_k partial (at w_k), b sum_i beta_i]        d + 2
        update     w(beta) = sum/lam (eq. 24); w <- (1 - tau) w + tau w(beta); q = M w(beta); z <- (1 - tau) z + tau q;
                   alpha = Proj(beta + (b - q)/L) (eq. 25, v(beta));  mu <- (1 - tau) mu;
                   J(w_k) and D(beta_k) = b^T beta - lam/2 ||w(beta)||^2 from the reduced scalars (the certificate),
                   and D(alpha-bar_{k+1}) of the averaged dual point with w_{k+1} = w(alpha-bar_{k+1}) (free)
    LS_BMRM / QP_BMRM   (section 2; notes-004 sections 1.2-1.5)
        local      the oracle at w: alpha*_i = 1/n [z_i < b] (hinge; ties go to "not violated", gotcha 21), or the
                   instance's adversarial argmax (an unused plane among the tied ones, gotcha 1)
        all-reduce [a = -sum alpha*_i y_i x_i, R(w) partial, b^T alpha* partial]       d + 2
        update     ls: the exact line search between (u, c) and (a, b_t) in the adjoint (notes 1.5);
                   qp: the plane joins the bundle and the simplex QP (10) is solved by `simplex_qp`;
                   w = -A alpha / lam; the lower bound D_t(alpha) (valid for any alpha in the simplex); z = M w
    PEGASOS_N  (Shalev-Shwartz et al., all n examples per step: a deterministic subgradient method)
        all-reduce [a] (d);  w <- (1 - 1/t) w - a/(lam t), then onto the ball of radius 1/sqrt(lam); z = M w

Pragam-b over K > 1 workers (notes-004 section 6: each projection onto {box, y^T alpha = 0} needs the global root nu
of g(nu) = sum_i y_i clip(m_i + y_i nu, 0, 1/n)): each projection is a root search whose every probe all-reduces the
5 scalars of `projection.bias_probe` over the state's auxiliary collective and moves as `projection.bias_root_step`
says (warm-started from the previous iteration's root), so an iteration is probes for alpha_mu(w_k), the d + 2
all-reduce, probes for v(beta_k); alpha_0 = v(alpha_{-1}) is the first search. One worker keeps Algorithm 2.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ...comm.collectives import Plan, aux_collective, collective_receive, plan, state_with_collective
from ...core.jit import inner
from ...numerics.vectors import dot as _dot
from ...program import KERNEL_WAKE
from ..allreduce import FIRST, WAITING, allreduce_receive, allreduce_start, aux_start
from .projection import PROBE_COMBINE, PROBE_WIDTH, bias_probe, bias_root_step, project_bias, project_box, project_simplex
from .simplex_qp import add_plane, compact_bundle, solve_simplex_qp

__all__ = ["BundleState", "DOMAIN_BIAS", "DOMAIN_BOX", "DOMAIN_SIMPLEX", "DOMAIN_SIMPLEX_EQ", "LS_BMRM", "METHOD_NAMES", "PEGASOS_N",
           "PRAGAM", "QP_BMRM", "bias_step", "bundle_state", "bundle_step", "extra_scalars", "run_solo"]

#: the methods
PRAGAM, LS_BMRM, QP_BMRM, PEGASOS_N = range(4)
METHOD_NAMES = ("pragam", "ls-bmrm", "qp-bmrm", "pegasos-n")
#: Pragam's dual domain Q2 (and the oracle's: the box gives the hinge, the simplex the instance's max)
DOMAIN_BOX, DOMAIN_BIAS, DOMAIN_SIMPLEX, DOMAIN_SIMPLEX_EQ = range(4)

BundleState = state_with_collective("BundleState", [
    # the group's shards as CSR rows; member m's rows are row_lo[m]..row_lo[m+1]
    ("indptr", np.ndarray), ("indices", np.ndarray), ("data", np.ndarray), ("y", np.ndarray),
    ("row_lo", np.ndarray),
    # per row: Pragam's alpha and beta, the scores z = M w and q = M w(beta), the projection's target, and the
    # instance's planes already chosen by the oracle
    ("alpha", np.ndarray), ("beta", np.ndarray), ("z", np.ndarray), ("q", np.ndarray), ("target", np.ndarray),
    ("chosen", np.ndarray),
    # the projection's scratch (per row: bounds, signs, live list; two kinks per row)
    ("uppers", np.ndarray), ("ones", np.ndarray), ("live", np.ndarray), ("kinks", np.ndarray),
    ("roots", np.ndarray),       # the last root of each of Pragam-b's two projections (alpha_mu, v): the next guess
    # replicated vectors: w, w(beta) (Pragam) or the subgradient a (BMRM), u = A alpha (ls-BMRM)
    ("w", np.ndarray), ("wbeta", np.ndarray), ("u", np.ndarray),
    # qp-BMRM's bundle: planes (rows), offsets, Gram matrix, the QP's alpha and gradient
    ("planes", np.ndarray), ("plane_offsets", np.ndarray), ("gram", np.ndarray), ("bundle_alpha", np.ndarray),
    ("qp_grad", np.ndarray),
    # constants
    ("method", int), ("domain", int), ("offset", float), ("lam", float), ("box_upper", float),
    ("lipschitz", float), ("dim", int), ("rounds_needed", int), ("project_ball", bool), ("qp_tol", float),
    ("qp_max_steps", int),
    # replicated scalars: mu (Pragam), c = b^T alpha (ls-BMRM), b^T alpha-bar (Pragam's averaged dual point), the best J seen and the best lower bound, the last
    # iterate's J and certificate lower bound, the bundle's size, the QP's last steps and gap, its failures and the
    # bundle's compactions
    ("mu", np.ndarray), ("c", np.ndarray), ("mass", np.ndarray), ("j_best", np.ndarray), ("lower", np.ndarray), ("j_last", np.ndarray),
    ("d_last", np.ndarray), ("bundle_size", np.ndarray), ("qp_steps", np.ndarray), ("qp_gap", np.ndarray),
    ("qp_failures", np.ndarray), ("compactions", np.ndarray),
    # progress: completed iterations, the round the current all-reduce started, the last round stepped
    ("iteration", np.ndarray), ("start_round", np.ndarray), ("last_round", np.ndarray),
    ("work", np.ndarray),            # per member: operations of its last step, for modelled time
    # Pragam-b over K > 1 workers: the phase (PHASE_*), the root search's probe and bracket, the probes and main
    # all-reduces completed, the round the auxiliary collective's probe started, and its rounds
    ("phase", np.ndarray), ("probe_nu", np.ndarray), ("bracket", np.ndarray), ("probes_done", np.ndarray),
    ("main_done", np.ndarray), ("aux_start_round", np.ndarray), ("aux_rounds_needed", int),
], aux=True)

#: where a group of Pragam-b workers over K > 1 stands: before anything, searching the root of alpha_0 =
#: v(alpha_{-1}), of alpha_mu(w_k), in the d + 2 all-reduce, searching the root of v(beta_k)
PHASE_START, PHASE_ROOT_V0, PHASE_ROOT_A, PHASE_MAIN, PHASE_ROOT_V = range(5)
#: a root search that has not ended after this many probes takes the middle of its bracket (bisection alone needs
#: about 64 probes to reach adjacent floats)
MAX_PROBES = 200


def extra_scalars(method: int) -> int:
    """Scalars beside the d-vector in each all-reduce."""
    return 0 if method == PEGASOS_N else 2


def probe_plan(pattern: str, workers: int, branching: int = 2) -> Plan:
    """The all-reduce of one root probe (Pragam-b over K > 1 workers): `projection.PROBE_WIDTH` scalars, summed,
    maxed and minned by column."""
    return plan("allreduce", pattern, np.arange(workers, dtype=np.int64), PROBE_WIDTH, branching=branching,
                combine=PROBE_COMBINE)


def bundle_state(plan: Plan, hosted: np.ndarray, shards: list, dim: int, tag_ids: dict, *, method: int,
                 domain: int, offset: float, lam: float, n_total: int, lipschitz: float, project_ball: bool = True,
                 max_bundle: int = 1, qp_tol: float = 1e-3, qp_max_steps: int = 100_000, seed: int = 0,
                 probe: Plan | None = None) -> BundleState:
    """The state of a group hosting workers `hosted` with CSR shards ``(X_k, y_k)``; `n_total` is the global n
    (the box is [0, 1/n]); `seed` draws Pragam's alpha_{-1} where 0 is not in Q2; `probe` (Pragam-b over K > 1
    workers): the root probes' all-reduce (`probe_plan`), whose tags "probe" and "probe-total" `tag_ids` maps."""
    from ..bqo.local_cd import concat_shards

    indptr, indices, data, y, row_lo = concat_shards(shards)
    n = int(row_lo[-1])
    coll = plan.arrays(hosted, np.zeros((len(hosted), plan.d)), tag_ids, "partial", "total")
    distributed_root = probe is not None and probe.k > 1
    if probe is None:                   # a collective of one: nothing to probe, never started
        probe = probe_plan("star", 1)
        aux = probe.arrays(np.array([0]), np.zeros((1, probe.d)), {})
    else:
        aux = probe.arrays(hosted, np.zeros((len(hosted), probe.d)), tag_ids, "probe", "probe-total")
    upper = 1.0 / n_total if domain in (DOMAIN_BOX, DOMAIN_BIAS) else 1.0
    bundle = max_bundle if method == QP_BMRM else 1
    one = lambda v=0.0: np.full(1, v)
    count = lambda: np.zeros(1, np.int64)
    st = BundleState(*coll, indptr, indices, data, y, row_lo,
                     np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, np.bool_),
                     np.full(n, upper), np.ones(n), np.zeros(n, np.int64), np.zeros(2 * n), np.full(2, np.nan),
                     np.zeros(dim), np.zeros(dim), np.zeros(dim),
                     np.zeros((bundle, dim if method == QP_BMRM else 0)), np.zeros(bundle), np.zeros((bundle, bundle)),
                     np.zeros(bundle), np.zeros(bundle),
                     int(method), int(domain), float(offset), float(lam), float(upper), float(lipschitz), int(dim),
                     int(plan.rounds()), bool(project_ball), float(qp_tol), int(qp_max_steps),
                     one(2.0 * lipschitz), one(), one(), one(math.inf), one(-math.inf), one(math.nan), one(math.nan),
                     count(), count(), one(math.nan), count(), count(),
                     count(), count(), count(), np.zeros(len(hosted)),
                     count(), np.full(1, np.nan), np.full(3, np.nan), count(), count(), count(), int(probe.rounds()),
                     *aux)
    if method == PRAGAM and not distributed_root:
        # alpha_{-1} = 0 where it lies in Q2 (w_0 = w(alpha_{-1}) = 0, z = 0); on the simplex sum = 1 (one group
        # holds every row) a random point, as Algorithm 1 says (its centre is the instance's optimum by symmetry).
        # Then alpha_0 = v(alpha_{-1}) = Proj(alpha_{-1} + (b - M w_0)/L)
        start = np.zeros(n)
        if domain == DOMAIN_SIMPLEX_EQ:
            import scipy.sparse as sp

            start[:] = np.random.default_rng(seed).random(n)
            start /= start.sum()
            M = sp.csr_matrix((data, indices, indptr), shape=(n, dim))
            st.w[:] = np.asarray(M.T @ (y * start)).ravel() / lam
            st.z[:] = y * np.asarray(M @ st.w).ravel()
            st.mass[0] = offset * start.sum()
        _first_alpha(st, start + (offset - st.z) / lipschitz)
    return st


@numba.njit(cache=True, nogil=True)
def _first_alpha(st, target):
    """alpha_0 = Proj_Q2(target) (from Python, at set-up)."""
    _project(st, target, st.alpha)


# ---------------------------------------------------------------------------------------------------------------
# pieces over the group's rows
# ---------------------------------------------------------------------------------------------------------------

@inner
def _project(st, target, out, which=0):
    """out = Proj_Q2(target) over all the group's rows (the bias and simplex domains need the whole of Q2: one
    group holds them all, see `build`); `which` names the projection (0: alpha_mu, 1: v), whose last root starts
    the next search."""
    if st.domain == DOMAIN_BOX:
        project_box(target, st.box_upper, out)
    elif st.domain == DOMAIN_BIAS:
        st.roots[which] = project_bias(target, st.y, st.box_upper, out, st.uppers, st.live, st.kinks,
                                       st.roots[which])
    else:
        project_simplex(target, out, st.ones, st.uppers, st.live, st.kinks, st.domain == DOMAIN_SIMPLEX)


@inner
def _scores(st, v, out):
    """out_i = y_i <x_i, v> for every row (one sparse matvec; the row walk as one running index, which numba
    compiles tighter than a range per row)."""
    indptr, indices, data, y = st.indptr, st.indices, st.data, st.y
    k = indptr[0]
    for i in range(y.shape[0]):
        acc = 0.0
        end = indptr[i + 1]
        while k < end:
            acc += data[k] * v[indices[k]]
            k += 1
        out[i] = y[i] * acc


@inner
def _gather_rows(st, m, weights, sign, row):
    """row[:dim] = sign * sum_i weights_i y_i x_i over member m's rows (the transposed matvec)."""
    for c in range(st.dim):
        row[c] = 0.0
    for i in range(st.row_lo[m], st.row_lo[m + 1]):
        f = sign * weights[i] * st.y[i]
        if f != 0.0:
            for k in range(st.indptr[i], st.indptr[i + 1]):
                row[st.indices[k]] += f * st.data[k]


@inner
def _member_work(st, matvecs, per_row):
    for m in range(st.row_lo.shape[0] - 1):
        lo, hi = st.row_lo[m], st.row_lo[m + 1]
        st.work[m] += matvecs * 2.0 * (st.indptr[hi] - st.indptr[lo]) + per_row * (hi - lo) + 2.0 * st.dim


@inner
def _oracle(st):
    """alpha* of R at the current scores z (written into st.beta): the hinge's violators, or the instance's
    adversarial choice (an unused plane among those attaining the max; the zero plane only when nothing else
    does)."""
    n = st.y.shape[0]
    if st.domain == DOMAIN_BOX or st.domain == DOMAIN_BIAS:
        for i in range(n):
            st.beta[i] = st.box_upper if st.z[i] < st.offset else 0.0
        return
    best = 0.0 if st.domain == DOMAIN_SIMPLEX else -math.inf          # the zero plane, if there is one
    for i in range(n):
        best = max(best, st.offset - st.z[i])
    tol = 1e-9 * (1.0 + abs(best))
    pick = -1
    for i in range(n):
        st.beta[i] = 0.0
        if st.offset - st.z[i] >= best - tol and (pick < 0 or (st.chosen[pick] and not st.chosen[i])):
            pick = i
    if pick >= 0:
        st.beta[pick] = 1.0
        st.chosen[pick] = True


# ---------------------------------------------------------------------------------------------------------------
# the local part (before the all-reduce) and the update (after it)
# ---------------------------------------------------------------------------------------------------------------

@inner
def _local_pragam_box(st):
    """`_local` for Pragam on the box (the hot path), fused: one pass over each member's rows computes
    alpha_mu(w_k), beta, the hinge sum, b^T beta and the scatter of beta_i y_i x_i (the same operations in the same
    order as the general path, so the same bits). Rows with beta_i = 0 are scattered too, without the general
    path's test: adding +-0 leaves every sum as it was (a sum that starts at +0 never becomes -0), and a branch on
    beta's zeros (about 40% of a9a's rows, scattered at random) cost more than the rows it skips."""
    dim = st.dim
    tau = 2.0 / (st.iteration[0] + 3.0)
    mu, upper, offset = st.mu[0], st.box_upper, st.offset
    z, alpha, beta, y, indptr, indices, data = st.z, st.alpha, st.beta, st.y, st.indptr, st.indices, st.data
    for m in range(st.row_lo.shape[0] - 1):
        row = st.value[m]
        for c in range(dim):
            row[c] = 0.0
        risk = 0.0
        mass = 0.0
        k = indptr[st.row_lo[m]]                      # one running index over the member's rows
        for i in range(st.row_lo[m], st.row_lo[m + 1]):
            h = offset - z[i]
            a = min(max(h / mu, 0.0), upper)          # the clip without branches (the rows' signs are a coin toss)
            b = (1.0 - tau) * alpha[i] + tau * a
            beta[i] = b
            f = b * y[i]
            end = indptr[i + 1]
            while k < end:
                row[indices[k]] += f * data[k]
                k += 1
            risk += upper * max(h, 0.0)
            mass += b * offset
        row[dim] = risk
        row[dim + 1] = mass
    _member_work(st, 1.0, 6.0)


@inner
def _alpha_mu_targets(st):
    """The point alpha_mu(w_k) projects: (b - z)/mu (eq. 23)."""
    for i in range(st.y.shape[0]):
        st.target[i] = (st.offset - st.z[i]) / st.mu[0]


@inner
def _local(st):
    """Every member's input to this iteration's all-reduce."""
    if st.method == PRAGAM and st.domain == DOMAIN_BOX:
        _local_pragam_box(st)
        return
    if st.method == PRAGAM:
        _alpha_mu_targets(st)
        _project(st, st.target, st.q)                        # alpha_mu(w_k) (q is scratch here)
    else:
        _oracle(st)                                           # alpha* into beta
    _local_inputs(st)


@inner
def _local_inputs(st):
    """Pragam's beta from alpha_mu(w_k) (in q), then every member's row of the all-reduce."""
    dim = st.dim
    if st.method == PRAGAM:
        tau = 2.0 / (st.iteration[0] + 3.0)
        for i in range(st.y.shape[0]):
            st.beta[i] = (1.0 - tau) * st.alpha[i] + tau * st.q[i]
    for m in range(st.row_lo.shape[0] - 1):
        row = st.value[m]
        _gather_rows(st, m, st.beta, 1.0 if st.method == PRAGAM else -1.0, row)
        if st.method != PEGASOS_N:
            risk = -math.inf if (st.method == PRAGAM and st.domain == DOMAIN_SIMPLEX_EQ) else 0.0
            mass = 0.0
            for i in range(st.row_lo[m], st.row_lo[m + 1]):
                if st.method == PRAGAM:                       # R(w_k): the hinge's sum, or the instance's max
                    if st.domain == DOMAIN_SIMPLEX or st.domain == DOMAIN_SIMPLEX_EQ:
                        risk = max(risk, st.offset - st.z[i])
                    else:
                        risk += st.box_upper * max(0.0, st.offset - st.z[i])
                else:
                    risk += st.beta[i] * (st.offset - st.z[i])
                mass += st.beta[i] * st.offset
            row[dim] = risk
            row[dim + 1] = mass
    _member_work(st, 1.0, 6.0)


@inner
def _finish_pragam(st, total):
    _pragam_update(st, total)
    if st.domain != DOMAIN_BOX:
        _project(st, st.target, st.alpha, 1)                  # v(beta_k), eq. (25)
    st.mu[0] *= 1.0 - 2.0 / (st.iteration[0] + 3.0)


@inner
def _pragam_update(st, total):
    """Pragam's update from the all-reduced total up to v(beta_k): on the box v itself (a clip), elsewhere the
    point it projects (in target)."""
    dim, lam = st.dim, st.lam
    tau = 2.0 / (st.iteration[0] + 3.0)
    for c in range(dim):
        st.wbeta[c] = total[c] / lam                          # w(beta_k), eq. (24)
    j = 0.5 * lam * _dot(st.w, st.w) + total[dim]             # J(w_k)
    d = total[dim + 1] - 0.5 * lam * _dot(st.wbeta, st.wbeta)  # D(beta_k) <= J*
    st.j_last[0] = j
    st.d_last[0] = d
    st.j_best[0] = min(st.j_best[0], j)
    st.lower[0] = max(st.lower[0], d)
    for c in range(dim):
        st.w[c] = (1.0 - tau) * st.w[c] + tau * st.wbeta[c]
    # w_{k+1} = w(alpha-bar_{k+1}) for alpha-bar the same average of the betas (alpha-bar_0 = alpha_{-1} = 0): a
    # point of Q2 whose D costs nothing more, and by concavity no worse than the average of the D(beta_j)
    st.mass[0] = (1.0 - tau) * st.mass[0] + tau * total[dim + 1]
    st.lower[0] = max(st.lower[0], st.mass[0] - 0.5 * lam * _dot(st.w, st.w))
    _scores(st, st.wbeta, st.q)
    if st.domain == DOMAIN_BOX:                               # z and v(beta_k) in one pass (the box is a clip)
        upper = st.box_upper
        for i in range(st.y.shape[0]):
            st.z[i] = (1.0 - tau) * st.z[i] + tau * st.q[i]
            st.alpha[i] = min(max(st.beta[i] + (st.offset - st.q[i]) / st.lipschitz, 0.0), upper)
    else:
        for i in range(st.y.shape[0]):
            st.z[i] = (1.0 - tau) * st.z[i] + tau * st.q[i]
            st.target[i] = st.beta[i] + (st.offset - st.q[i]) / st.lipschitz


@inner
def _finish_bmrm(st, total):
    dim, lam = st.dim, st.lam
    j = 0.5 * lam * _dot(st.w, st.w) + total[dim]             # J(w_{t-1}) from the oracle
    st.j_last[0] = j
    st.j_best[0] = min(st.j_best[0], j)
    b_t = total[dim + 1]
    if st.method == LS_BMRM:                                  # notes-004 section 1.5
        if st.iteration[0] == 0:
            eta = 1.0
        else:
            num = lam * (b_t - st.c[0])
            den = 0.0
            for c in range(dim):
                diff = total[c] - st.u[c]
                num -= st.u[c] * diff
                den += diff * diff
            eta = min(max(num / den, 0.0), 1.0) if den > 0.0 else 0.0
        for c in range(dim):
            st.u[c] = (1.0 - eta) * st.u[c] + eta * total[c]
        st.c[0] = (1.0 - eta) * st.c[0] + eta * b_t
        for c in range(dim):
            st.w[c] = -st.u[c] / lam
        st.d_last[0] = -0.5 * _dot(st.u, st.u) / lam + st.c[0]
    else:
        if st.bundle_size[0] == st.planes.shape[0]:
            compact_bundle(st)
        add_plane(st, total[:dim], b_t)
        gap_scale = st.j_best[0] - st.lower[0]
        if not gap_scale < math.inf:
            gap_scale = abs(st.j_best[0])
        # a fraction of the outer certified gap, never below rounding (and never negative)
        solve_simplex_qp(st, max(st.qp_tol * gap_scale, 1e-13 * (abs(st.j_best[0]) + abs(b_t)), 0.0))
        t = st.bundle_size[0]
        for c in range(dim):
            st.w[c] = 0.0
        for p in range(t):
            a = st.bundle_alpha[p]
            if a != 0.0:
                for c in range(dim):
                    st.w[c] -= a * st.planes[p, c]
        for c in range(dim):
            st.w[c] /= lam
        lin = 0.0
        for p in range(t):
            lin += st.bundle_alpha[p] * st.plane_offsets[p]
        st.d_last[0] = -0.5 * lam * _dot(st.w, st.w) + lin      # D_t(alpha), eq. (10)
        for m in range(st.work.shape[0]):
            st.work[m] += 2.0 * t * dim + st.qp_steps[0] * 4.0 * t
    st.lower[0] = max(st.lower[0], st.d_last[0])
    _scores(st, st.w, st.z)


@inner
def _finish_pegasos(st, total):
    dim, lam = st.dim, st.lam
    t = st.iteration[0] + 1.0
    for c in range(dim):
        st.w[c] = (1.0 - 1.0 / t) * st.w[c] - total[c] / (lam * t)
    if st.project_ball:
        norm = math.sqrt(_dot(st.w, st.w))
        radius = 1.0 / math.sqrt(lam)
        if norm > radius:
            for c in range(dim):
                st.w[c] *= radius / norm
    _scores(st, st.w, st.z)


@inner
def _finish(st):
    """The update from the all-reduced vector (every member holds the same)."""
    total = st.value[0]
    if st.method == PRAGAM:
        _finish_pragam(st, total)
    elif st.method == PEGASOS_N:
        _finish_pegasos(st, total)
    else:
        _finish_bmrm(st, total)
    _member_work(st, 1.0, 6.0)
    st.iteration[0] += 1


# ---------------------------------------------------------------------------------------------------------------
# Pragam-b over K > 1 workers: the projections' roots searched by probes over the auxiliary collective
# ---------------------------------------------------------------------------------------------------------------

@inner
def _probe_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out):
    """Every member's part of a probe at st.probe_nu, all-reduced from this round on."""
    aux = aux_collective(st)
    for m in range(st.row_lo.shape[0] - 1):
        bias_probe(st.target, st.y, st.box_upper, st.probe_nu[0], st.row_lo[m], st.row_lo[m + 1], aux.value[m])
        st.work[m] += 12.0 * (st.row_lo[m + 1] - st.row_lo[m])
    return aux_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)


@inner
def _root_begin(st, which, round_, out_tag, out_src, out_dst, out_payload, n_out):
    """Start the root search of projection `which` (0: alpha_mu, 1: v) of the points in target, from its last
    root."""
    guess = st.roots[which]
    st.probe_nu[0] = guess if guess == guess else 0.0
    st.bracket[0] = -math.inf
    st.bracket[1] = math.inf
    st.bracket[2] = 0.0
    return _probe_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)


@inner
def _apply_root(st, nu, out):
    """out = the projection of target with the root nu: clip(m_i + y_i nu, 0, U)."""
    upper = st.box_upper
    for i in range(st.y.shape[0]):
        v = st.target[i] + st.y[i] * nu
        out[i] = 0.0 if v < 0.0 else (upper if v > upper else v)


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def bias_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """One round of a group of Pragam-b workers over K > 1 (the `SyncKernel` step in place of `bundle_step`): a
    root search, the all-reduce, a root search."""
    st.last_round[0] = round_
    st.work[:] = 0.0
    aux = aux_collective(st)
    n_out = 0
    if st.started[0]:
        n_out = collective_receive(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                                   out_payload, n_out)
    if aux.started[0]:
        n_out = collective_receive(aux, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                                   out_payload, n_out)
    phase = st.phase[0]
    if phase == PHASE_START:             # alpha_0 = v(alpha_{-1}) with alpha_{-1} = 0 and z = M w_0 = 0: Proj(b/L)
        for i in range(st.y.shape[0]):
            st.target[i] = st.offset / st.lipschitz
        st.phase[0] = PHASE_ROOT_V0
        return _root_begin(st, 1, round_, out_tag, out_src, out_dst, out_payload, n_out), -1, KERNEL_WAKE
    if phase == PHASE_MAIN:
        if round_ - st.start_round[0] < st.rounds_needed:
            return n_out, -1, KERNEL_WAKE
        st.main_done[0] += 1
        _pragam_update(st, st.value[0])
        _member_work(st, 1.0, 6.0)
        st.phase[0] = PHASE_ROOT_V
        return _root_begin(st, 1, round_, out_tag, out_src, out_dst, out_payload, n_out), -1, KERNEL_WAKE
    if round_ - st.aux_start_round[0] < st.aux_rounds_needed:
        return n_out, -1, KERNEL_WAKE
    st.probes_done[0] += 1
    st.bracket[2] += 1.0
    found, nu = bias_root_step(aux.value[0], st.probe_nu[0], st.bracket)
    if not found and st.bracket[2] >= MAX_PROBES:
        found, nu = True, 0.5 * (st.bracket[0] + st.bracket[1])
    if not found:
        st.probe_nu[0] = nu
        return _probe_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out), -1, KERNEL_WAKE
    if phase == PHASE_ROOT_A:
        st.roots[0] = nu
        _apply_root(st, nu, st.q)                             # alpha_mu(w_k)
        _local_inputs(st)
        st.phase[0] = PHASE_MAIN
        return allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out), -1, KERNEL_WAKE
    st.roots[1] = nu
    _apply_root(st, nu, st.alpha)                             # v(beta_k), or alpha_0 = v(alpha_{-1})
    done = -1
    if phase == PHASE_ROOT_V:
        st.mu[0] *= 1.0 - 2.0 / (st.iteration[0] + 3.0)
        st.iteration[0] += 1
        done = st.iteration[0]
    _alpha_mu_targets(st)
    st.phase[0] = PHASE_ROOT_A
    return _root_begin(st, 0, round_, out_tag, out_src, out_dst, out_payload, n_out), done, KERNEL_WAKE


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def bundle_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """One round of a group of workers (the `SyncKernel` step; Pragam-b over K > 1 workers steps with
    `bias_step`)."""
    n_out, where = allreduce_receive(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src,
                                     out_dst, out_payload)
    if where == FIRST:
        _local(st)
        n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
        if st.rounds_needed > 0:
            return n_out, -1, KERNEL_WAKE
    elif where == WAITING:
        return n_out, -1, KERNEL_WAKE
    _finish(st)
    _local(st)
    n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out, st.iteration[0], KERNEL_WAKE


@numba.njit(cache=True, nogil=True)
def run_solo(st, iterations):
    """`iterations` iterations of a one-worker group without transport (the estimators): its own row is the
    all-reduce's total."""
    for _ in range(iterations):
        _local(st)
        _finish(st)
