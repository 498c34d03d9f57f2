"""Gossip averaging: Push-Sum (Kempe, Dobra & Gehrke 2003; paper 002's Algorithm 1), its loss-tolerant
running-sum form, and randomised pairwise averaging (Boyd et al. 2006, what the GADGET authors' code runs).

Read beside notes-002.md section 2. Node i starts with a value x_i (a d-vector: the mean of its training points,
or random numbers) and every node wants the network average. Nodes run on the gossip scheduler's clocks; when
node i's clock ticks it picks a target j from row i of a mixing matrix of the topology (``mixing``: the random
walk "neighbour" b_ij = 1/deg(i), "metropolis" (Metropolis-Hastings) or "uniform" 1/(deg(i)+1), self included;
j = i sends nothing that tick).

Variants (``variant``):

* ``pushsum`` -- Push-Vector with sums and weights: node i holds (s_i, w_i) = (x_i, 1); on a tick it keeps
  (1 - share)(s_i, w_i) and sends share * (s_i, w_i) to j (tag "push", d + 1 scalars); the receiver adds it. The
  estimate is s_i / w_i. Mass conservation: sum of s (and of w) over nodes plus messages in flight is invariant;
  a lost message destroys its mass.
* ``running-sum`` -- the same pushes, but node i keeps per out-edge the running total sigma_ij of all it ever
  pushed to j and sends sigma_ij (tag "push_cumulative", d + 1 scalars). Node j keeps rho_ji, the last total it
  applied from i, adds sigma - rho and sets rho = sigma. A message whose total weight is not larger than rho's is
  stale (overtaken or duplicated) and ignored. A lost message's mass arrives with the next message on that edge:
  sum_i s_i + sum_edges (sigma - rho) = sum_i x_i exactly, whatever is lost, duplicated or reordered (the
  running-sum / push-flow idea of Hadjicostis, Dominguez-Garcia and Charalambous).
* ``pairwise`` -- randomised pairwise averaging: i sends x_i ("average", d scalars); j sets
  x_j <- (x_i + x_j)/2 and answers with the negated change it made ("average_reply", d scalars), which i adds.
  Conserves sum x even when exchanges overlap; a lost request changes nothing, a lost reply loses its part.

``weighted = true`` averages with the nodes' point counts n_i as weights (s_i = n_i * mean_i, w_i = n_i), the
average over all training points (notes-002: the analysis' sum n_i w_i / N).

The numerics live in numba functions (`pushsum_wake`, `pushsum_receive`) that both the Python methods and the
compiled event loop call, so both give the same run bit for bit. Metrics: ``consensus_error`` =
max_i |estimate_i - average| / max_i |x_i - average| (relative, 1 at the start; measured against the known
average, not a certificate: ``[stop] below = {consensus_error = ...}`` stops on it), ``consensus_rms`` (root
mean square, same scale), ``weight_at_nodes`` (sum w over nodes / its initial value: mass in flight or lost shows
here). The deployment's ``info`` (a run's ``algorithm_info``, and the rows of a sweep) carries the topology's facts
from `gossip_topology_info`: the spectral gap of the gossip chain, 1/gap, the mixing time, the diameter and degrees.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numba
import numpy as np

from ...comm.message import MessageBatch, Outbox
from ...core.names import NodeNames
from ...core.streams import STREAM_PROGRAM, counter_uniform, stream_keys
from ...errors import DataError, InfeasibleParameterError, ScenarioError, TopologyError
from ...numerics.csr import part_row_sums, sorted_position
from ...numerics.prefetch import prefetch, prefetch_row
from ...numerics.vectors import pairwise_sum, segment_cumsum
from ...program import GossipKernel, GossipProgram, NodeRows, RoleSpec, frozen_view
from ...topology import (MIXING_RULES, build_topology, check_connected, metropolis_hastings_weights,
                         mixing_probabilities, mixing_rows, neighbour_csr)
from .params import PushSumParams

__all__ = ["PushSum", "PushSumParams", "build_pushsum", "pushsum_wake", "pushsum_receive", "mass", "tag_widths",
           "gossip_topology_info", "VARIANTS", "MIXINGS", "TAGS", "SPECTRAL_MAX_NODES", "MIXING_TIME_EPS"]

VARIANTS = ("pushsum", "running-sum", "pairwise")
MIXINGS = MIXING_RULES
#: message tags by tag id (the compiled loop's tag ids)
TAGS = ("push", "push_cumulative", "average", "average_reply")
TAG_PUSH, TAG_CUMULATIVE, TAG_AVERAGE, TAG_REPLY = range(4)
_TAG_ID = {t: i for i, t in enumerate(TAGS)}
#: the program's settings and its count of finished nodes (one record; `done` grows as nodes reach `max_wakes`)
SETTINGS = np.dtype([("variant", np.int64), ("max_wakes", np.int64), ("dim", np.int64), ("done", np.int64),
                     ("size", np.int64), ("share", np.float64)], align=True)
#: per hosted node: its clock ticks, the messages it sent of each kind and those it received
NODE_COUNTS = np.dtype([("wakes", np.int64), ("push", np.int64), ("cumulative", np.int64), ("average", np.int64),
                        ("reply", np.int64), ("received", np.int64)], align=True)
#: the kinds of message sent, as `NODE_COUNTS` fields (in tag order)
SENT_FIELDS = ("push", "cumulative", "average", "reply")


class PushSumArrays(NamedTuple):
    """What the numba functions act on for a group of hosted nodes (row i: the group's i-th node)."""

    local_of: np.ndarray        # node id -> row (-1: another group's node)
    s0: np.ndarray              # initial sums and weights (read only)
    w0: np.ndarray
    s: np.ndarray               # current sums and weights
    w: np.ndarray
    sigma: np.ndarray           # running-sum: per out-edge slot, the total pushed (empty for the other variants)
    rho: np.ndarray             # running-sum: per in-edge slot, the last total applied
    nbr_ptr: np.ndarray         # neighbours of row i: nbr[nbr_ptr[i]:nbr_ptr[i + 1]] (sorted node ids)
    nbr: np.ndarray
    cand_ptr: np.ndarray        # tick targets of row i: cand_node[cand_ptr[i]:cand_ptr[i + 1]], their edge slots
    cand_node: np.ndarray       # (-1: the node itself) and the running sums of their mixing probabilities
    cand_slot: np.ndarray
    cand_cum: np.ndarray
    target_key: np.ndarray      # per row: the key of its target stream
    counts: np.ndarray          # per row: one `NODE_COUNTS` record
    settings: np.ndarray        # one `SETTINGS` record


#: above this many nodes `gossip_topology_info` reads the spectrum with a sparse solver and bounds the diameter
SPECTRAL_MAX_NODES = 2000
#: the accuracy of the reported mixing time, log(1/eps)/gap
MIXING_TIME_EPS = 1e-2


def gossip_topology_info(G: nx.Graph, mixing: str = "neighbour", share: float = 0.5) -> dict:
    """The topology facts that decide how fast gossip mixes, for a run's ``algorithm_info`` (and sweep rows).

    ``spectral_gap`` is 1 - |mu_2| of the gossip chain W = (1 - share) I + share B, where B is the target
    distribution (``mixing``: neighbour 1/deg i, metropolis, or uniform 1/(deg i + 1) with self) and share the
    fraction a tick moves (1/2 for Push-Sum and for GADGET). It is the decay rate per round of the expected
    disagreement (every node ticks once per round on average: E[s] evolves by exp(-share (I - B^T)) per round),
    so rounds to a relative consensus error gamma are about log(1/gamma) / spectral_gap; ``mixing_time`` =
    log(1/MIXING_TIME_EPS) / gap is that count for gamma = 0.01. B is reversible for all three choices, so the
    spectrum is read from a symmetric similar matrix (real). Also: ``inv_spectral_gap``, ``edges``,
    ``mean_degree``, ``max_degree``, ``diameter`` and the Metropolis-Hastings matrix's gap
    ``spectral_gap_metropolis``. Up to SPECTRAL_MAX_NODES nodes the spectrum is exact (dense) and the diameter too;
    above, the extreme eigenvalues come from a sparse Lanczos solver (ARPACK, refined until each gap is known to
    GAP_ACCURACY of itself: ``spectral_gap_error`` and ``spectral_gap_metropolis_error`` are the relative error
    bounds; one that does not converge leaves its facts out and says so in ``spectral_note``) and ``diameter`` is
    a lower bound from BFS sweeps (``diameter_is_lower_bound`` = True; exact on trees, a hop or two short on the
    random graphs tried).
    """
    import math

    import scipy.sparse as sp
    import scipy.sparse.csgraph as csgraph

    n = G.number_of_nodes()
    ptr, nbr = neighbour_csr(G)                    # the adjacency without self-loops, sorted rows
    A = sp.csr_array((np.ones(nbr.shape[0]), nbr, ptr), shape=(n, n))
    deg = np.asarray(A.sum(axis=1)).ravel()
    info: dict = {"topology": G.graph.get("kind", "graph"), "edges": int(A.nnz // 2),
                  "mean_degree": float(deg.mean()), "max_degree": int(deg.max()), "gossip_share": float(share),
                  "gossip_mixing": mixing}
    dense = n <= SPECTRAL_MAX_NODES
    if dense:
        lam, lam_mh = _dense_spectra(G, A, deg, mixing)
    else:
        lam, lam_mh = _sparse_spectra(A, deg, mixing, share, info)
    if lam is not None:
        mu = max(abs((1.0 - share) + share * lam[0]), abs((1.0 - share) + share * lam[1])) if n > 1 else 0.0
        gap = float(min(1.0, max(0.0, 1.0 - mu)))
        info.update(spectral_gap=gap, inv_spectral_gap=(1.0 / gap) if gap > 0 else math.inf,
                    mixing_time=(math.log(1.0 / MIXING_TIME_EPS) / gap) if gap > 0 else math.inf)
    if lam_mh is not None:
        info["spectral_gap_metropolis"] = float(min(1.0, max(0.0, 1.0 - max(abs(lam_mh[0]), abs(lam_mh[1])))))
    if dense:
        dist = csgraph.shortest_path(A, method="D", directed=False, unweighted=True)
        info["diameter"] = int(dist.max()) if np.isfinite(dist).all() else None
    else:
        info["diameter"], info["diameter_is_lower_bound"] = _diameter_lower_bound(A), True
    return info


#: the sparse solver's spectral gaps are refined until their error bound is within this fraction of the gap
GAP_ACCURACY = 1e-3
#: ARPACK's first relative tolerance, the smallest it is refined to, and its restarts per solve before it gives up
#: (a gap too small to resolve: a long ring, say); the smallest eigenvalue's first solve is looser, as it decides
#: the gap only where it comes near -1 (nearly bipartite graphs), and is refined there
FIRST_LANCZOS_TOL = 1e-3
FIRST_SMALLEST_TOL = 1e-1
MIN_LANCZOS_TOL = 1e-12
LANCZOS_RESTARTS = 300


def _similar(A, deg: np.ndarray, mixing: str):
    """The symmetric matrix similar to B (neighbour: D^-1/2 A D^-1/2; uniform: with self loops; metropolis: B)."""
    import scipy.sparse as sp

    if mixing == "neighbour":
        r = sp.diags(1.0 / np.sqrt(np.maximum(deg, 1.0)))
        return (r @ A @ r).tocsr()
    if mixing == "uniform":
        r = sp.diags(1.0 / np.sqrt(deg + 1.0))
        return (r @ (A + sp.identity(A.shape[0])) @ r).tocsr()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    off = sp.csr_matrix((1.0 / (1.0 + np.maximum(deg[rows], deg[A.indices])), A.indices, A.indptr), shape=A.shape)
    return (off + sp.diags(1.0 - np.asarray(off.sum(axis=1)).ravel())).tocsr()


def _dense_spectra(G, A, deg, mixing):
    """(second largest, smallest) eigenvalue of B's similar matrix and of Metropolis-Hastings', exactly."""
    n = A.shape[0]
    if n == 1:
        return np.zeros(2), np.zeros(2)
    dense = A.toarray()
    if mixing == "neighbour":
        r = 1.0 / np.sqrt(np.maximum(deg, 1.0))
        S = r[:, None] * dense * r[None, :]
    elif mixing == "uniform":
        r = 1.0 / np.sqrt(deg + 1.0)
        S = r[:, None] * (dense + np.eye(n)) * r[None, :]
    else:
        S = metropolis_hastings_weights(G)
    lam = np.linalg.eigvalsh((S + S.T) / 2.0)                # ascending; lam[-1] = 1
    lam_mh = lam if mixing == "metropolis" else np.linalg.eigvalsh(metropolis_hastings_weights(G))
    return np.array([lam[-2], lam[0]]), np.array([lam_mh[-2], lam_mh[0]])


def _ritz(S, which: str, tol: float, start: np.ndarray) -> tuple[float, float, np.ndarray]:
    """One extreme eigenvalue of the symmetric S by ARPACK: (theta, the residual norm ||S x - theta x|| of its unit
    Ritz vector x, a start vector for a tighter solve). By Weyl's theorem an eigenvalue of S lies within the
    residual of theta; which = "LA": the second largest (the largest, 1, is known), "SA": the smallest."""
    from scipy.sparse.linalg import eigsh

    k = 2 if which == "LA" else 1
    vals, vecs = eigsh(S, k=k, which=which, tol=tol, maxiter=LANCZOS_RESTARTS, v0=start)
    j = int(np.argsort(vals)[0])                       # LA: the smaller of the two; SA: the one
    x = vecs[:, j] / np.linalg.norm(vecs[:, j])
    theta = float(vals[j])
    return theta, float(np.linalg.norm(S @ x - theta * x)), vecs.sum(axis=1)


def _abs_affine_range(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """The range of |a + b lam| over lam in [lo, hi] (b >= 0)."""
    ends = sorted((abs(a + b * lo), abs(a + b * hi)))
    return (0.0 if (a + b * lo) * (a + b * hi) < 0 else ends[0]), ends[1]


def _gap_with_bound(ritz: list, a: float, b: float) -> tuple[float, float]:
    """The gap 1 - max |a + b lam| over the eigenvalues `ritz` ((theta, residual) pairs) and its error bound (the
    largest distance from the gap to an end of its interval)."""
    mu = max(abs(a + b * t) for t, _ in ritz)
    ranges = [_abs_affine_range(t - r, t + r, a, b) for t, r in ritz]
    mu_lo, mu_hi = max(lo for lo, _ in ranges), max(hi for _, hi in ranges)
    return 1.0 - mu, max(mu_hi - mu, mu - mu_lo)


def _sparse_spectra(A, deg, mixing, share, info: dict):
    """The same two eigenvalues by ARPACK (None where it does not converge, with a note in info), with error bounds:
    each solve starts at FIRST_LANCZOS_TOL (the smallest eigenvalue's at FIRST_SMALLEST_TOL) and is refined, from
    its Ritz vectors, until the gap it decides is known to GAP_ACCURACY of itself (``spectral_gap_error``,
    ``spectral_gap_metropolis_error``: relative bounds). With
    share <= 1/2 the chain's smallest eigenvalue cannot decide its gap ((1 - share) + share lam >= 0 for lam >= -1),
    so only the Metropolis-Hastings matrix needs it."""
    import math

    from scipy.sparse.linalg import ArpackNoConvergence

    out = []
    for rule in (mixing, "metropolis") if mixing != "metropolis" else (mixing,):
        S = _similar(A, deg, rule)
        a, b = (1.0 - share, share) if rule == mixing else (0.0, 1.0)    # gap of W = (1 - share) I + share B
        name = "spectral_gap_error" if rule == mixing else "spectral_gap_metropolis_error"
        # a fixed start vector: ARPACK's own random one changes from call to call, and so would the last bits
        start = np.random.default_rng(0).random(S.shape[0]) + 0.5
        kinds = ("LA", "SA") if (rule == "metropolis" or share > 0.5) else ("LA",)
        try:
            first = {"LA": FIRST_LANCZOS_TOL, "SA": FIRST_SMALLEST_TOL}
            solves = {which: (first[which], *_ritz(S, which, first[which], start)) for which in kinds}
            while True:
                ritz = [(t, r) for _, t, r, _ in solves.values()] + ([] if "SA" in solves else [(-1.0, 0.0)])
                gap, err = _gap_with_bound(ritz, a, b)
                if err <= GAP_ACCURACY * gap:
                    break
                # refine the solves whose interval reaches the gap's error: ten times tighter, from their vectors
                mu = 1.0 - gap
                loose = [w for w, (tol, t, r, _) in solves.items()
                         if b * r > 0.5 * GAP_ACCURACY * gap and abs(a + b * t) + b * r >= mu - err
                         and tol > MIN_LANCZOS_TOL]
                if not loose:
                    break
                for w in loose:
                    tol, _, _, v = solves[w]
                    solves[w] = (tol / 10.0, *_ritz(S, w, tol / 10.0, v))
            info[name] = err / gap if gap > 0 else math.inf
            thetas = {w: t for w, (_, t, _, _) in solves.items()}
            out.append(np.array([thetas["LA"], thetas.get("SA", -1.0)]))
        except ArpackNoConvergence:
            out.append(None)
            info["spectral_note"] = (f"the sparse eigensolver did not converge in {LANCZOS_RESTARTS} restarts for the "
                                     f"{rule} matrix of {A.shape[0]} nodes (a tiny spectral gap, or eigenvalues "
                                     "crowded at the end it looks for); its facts are left out")
    return out[0], out[-1]


def _diameter_lower_bound(A, sweeps: int = 4) -> int | None:
    """The largest eccentricity BFS sweeps find (each from the farthest node of the last; a lower bound on the
    diameter, exact on trees); None when the graph is not connected."""
    import scipy.sparse.csgraph as csgraph

    best, source = -1, 0
    for _sweep in range(sweeps):
        dist = csgraph.shortest_path(A, method="D", directed=False, unweighted=True, indices=[source])[0]
        if not np.isfinite(dist).all():
            return None
        far = int(np.argmax(dist))
        if dist[far] <= best:
            break
        best, source = int(dist[far]), far
    return best


def tag_widths(d: int) -> np.ndarray:
    """Scalars per message of each tag: pushes carry (s, w) (d + 1), averaging messages carry x (d)."""
    return np.array([d + 1, d + 1, d, d], dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------------
# Numerics (shared by the Python methods and the compiled event loop)
# ----------------------------------------------------------------------------------------------------------------

@numba.njit(cache=True)
def _edge_slot(nbr_ptr, nbr, i, j):
    """Position of neighbour j in local node i's sorted neighbour list (its edge slot)."""
    return sorted_position(nbr_ptr, nbr, i, j)


@numba.njit(cache=True)
def pushsum_wake(arrays, node, t, out_dst, out_tag, out_pay):
    """Node `node`'s clock ticked: pick a target from its mixing row and push (or ask for an average).
    `arrays`: a `PushSumArrays`."""
    s, w, sigma = arrays.s, arrays.w, arrays.sigma
    settings = arrays.settings[0]
    i = arrays.local_of[node]
    counts = arrays.counts[i]
    k = counts.wakes
    counts.wakes = k + 1
    max_wakes = settings.max_wakes
    if max_wakes >= 0:
        if k >= max_wakes:
            return 0, settings.done >= settings.size
        if k + 1 == max_wakes:
            settings.done += 1
    done = settings.done >= settings.size
    u = counter_uniform(arrays.target_key[i], k)
    cand_ptr, cand_cum = arrays.cand_ptr, arrays.cand_cum
    c = cand_ptr[i]
    last = cand_ptr[i + 1] - 1
    while c < last and u >= cand_cum[c]:
        c += 1
    j = arrays.cand_node[c]
    if j == node:
        return 0, done
    d = settings.dim
    share = settings.share
    variant = settings.variant
    if variant == 0:                                   # push-sum: send a share of (s, w)
        for q in range(d):
            part = share * s[i, q]
            s[i, q] = s[i, q] - part
            out_pay[0, q] = part
        part = share * w[i]
        w[i] = w[i] - part
        out_pay[0, d] = part
        out_tag[0] = TAG_PUSH
        counts.push += 1
    elif variant == 1:                                 # running sum: add the share to the edge's total, send it
        e = arrays.cand_slot[c]
        for q in range(d):
            part = share * s[i, q]
            s[i, q] = s[i, q] - part
            sigma[e, q] = sigma[e, q] + part
            out_pay[0, q] = sigma[e, q]
        part = share * w[i]
        w[i] = w[i] - part
        sigma[e, d] = sigma[e, d] + part
        out_pay[0, d] = sigma[e, d]
        out_tag[0] = TAG_CUMULATIVE
        counts.cumulative += 1
    else:                                              # pairwise: ask j to average with x_i
        for q in range(d):
            out_pay[0, q] = s[i, q]
        out_tag[0] = TAG_AVERAGE
        counts.average += 1
    out_dst[0] = j
    return 1, done


@numba.njit(cache=True)
def pushsum_prefetch(arrays, node):
    """Prefetch what node `node`'s next tick or delivery reads (`GossipKernel.prefetch`): s, w, its counts, its
    target stream and its mixing row."""
    i = arrays.local_of[node]
    prefetch_row(arrays.s, i)
    prefetch(arrays.w, i)
    prefetch(arrays.counts, i)
    prefetch(arrays.target_key, i)
    prefetch(arrays.cand_ptr, i)


@numba.njit(cache=True)
def pushsum_receive(arrays, dst, src, tag, payload, t, out_dst, out_tag, out_pay):
    """A message from `src` arrived at `dst`: add the pushed mass, apply a running total, or average."""
    s, w, rho = arrays.s, arrays.w, arrays.rho
    settings = arrays.settings[0]
    i = arrays.local_of[dst]
    counts = arrays.counts[i]
    counts.received += 1
    d = settings.dim
    done = settings.done >= settings.size
    if tag == TAG_PUSH:
        for q in range(d):
            s[i, q] = s[i, q] + payload[q]
        w[i] = w[i] + payload[d]
        return 0, done
    if tag == TAG_CUMULATIVE:
        e = _edge_slot(arrays.nbr_ptr, arrays.nbr, i, src)
        if payload[d] > rho[e, d]:                     # newer than what was applied: add the difference
            for q in range(d):
                s[i, q] = s[i, q] + (payload[q] - rho[e, q])
                rho[e, q] = payload[q]
            w[i] = w[i] + (payload[d] - rho[e, d])
            rho[e, d] = payload[d]
        return 0, done
    if tag == TAG_AVERAGE:
        for q in range(d):
            old = s[i, q]
            new = 0.5 * (payload[q] + old)
            s[i, q] = new
            out_pay[0, q] = old - new
        out_dst[0] = src
        out_tag[0] = TAG_REPLY
        counts.reply += 1
        return 1, done
    for q in range(d):                                 # the reply to our averaging request
        s[i, q] = s[i, q] + payload[q]
    return 0, done


@numba.njit(cache=True)
def pushsum_recover(arrays, node, keep_state):
    """A node comes back; without its state it restarts from its initial value and forgets its edge totals."""
    if keep_state:
        return
    s, w, s0, w0, sigma, rho = arrays.s, arrays.w, arrays.s0, arrays.w0, arrays.sigma, arrays.rho
    nbr_ptr = arrays.nbr_ptr
    i = arrays.local_of[node]
    for q in range(s.shape[1]):
        s[i, q] = s0[i, q]
    w[i] = w0[i]
    if sigma.shape[0] == 0:                            # only the running-sum variant keeps edge totals
        return
    for e in range(nbr_ptr[i], nbr_ptr[i + 1]):
        for q in range(sigma.shape[1]):
            sigma[e, q] = 0.0
            rho[e, q] = 0.0


# ----------------------------------------------------------------------------------------------------------------
# The node program
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class PushSumState:
    """A group's state: `arrays` is what the numba functions act on."""

    node_ids: np.ndarray
    arrays: PushSumArrays
    out_dst: np.ndarray
    out_tag: np.ndarray
    out_pay: np.ndarray
    widths: np.ndarray          # scalars per message of each tag

    @property
    def dim(self) -> int:
        return int(self.arrays.settings[0]["dim"])


def _node_value(node: int, data, weighted: bool) -> tuple[np.ndarray, float]:
    """(s0, w0) of one node: its value and weight 1, or (with weighted) its points' sum and count."""
    if data is None:
        raise DataError(f"node {node} has no data; push-sum needs every node's value (its training points or a "
                        "'value' vector)")
    if "value" in data:
        return np.asarray(data["value"], dtype=np.float64).ravel(), float(data.get("weight", 1.0))
    X = data["X"]
    count = X.shape[0]
    if count == 0:
        raise DataError(f"node {node} has no data points; push-sum averages every node's mean point, so each node "
                        "needs at least one (use fewer nodes, a partition that gives every node points, or "
                        "values = \"random\")")
    total = np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
    return (total, float(count)) if weighted else (total / count, 1.0)


def _initial_values(node_ids: np.ndarray, node_data, weighted: bool) -> tuple[np.ndarray, np.ndarray]:
    """(s0, w0) of the nodes, as rows: from `NodeRows` values (and weights) in whole arrays, without a copy (the
    programs only read s0 and w0), else node by node."""
    if isinstance(node_data, NodeRows) and "value" in node_data.columns:
        cols = node_data.columns
        s0 = np.asarray(cols["value"], dtype=np.float64).reshape(len(node_data), -1)
        w0 = np.asarray(cols["weight"], dtype=np.float64) if "weight" in cols else np.ones(len(node_data))
        return s0, w0
    values = [_node_value(int(v), data, weighted) for v, data in zip(node_ids, node_data)]
    dims = {v[0].shape[0] for v in values}
    if len(dims) != 1:
        raise DataError(f"push-sum needs values of one length at every node; found lengths {sorted(dims)}")
    return np.stack([v[0] for v in values]), np.array([v[1] for v in values])


class PushSum(GossipProgram):
    """Push-Sum, running-sum Push-Sum or pairwise averaging over `topology` (see the module docstring).

    node_data per node: ``{"X": its training points}`` (value = their mean) or ``{"value": a vector}``.
    max_wakes: each node stops after this many clock ticks; the program is done when all have (None: never).
    """

    role = "peer"

    def __init__(self, topology: nx.Graph, variant: str = "pushsum", mixing: str = "neighbour", share: float = 0.5,
                 max_wakes: int | None = None, weighted: bool = False):
        if variant not in VARIANTS:
            raise ScenarioError(f"variant = {variant!r} is not a push-sum variant; allowed: {', '.join(VARIANTS)}")
        if mixing not in MIXINGS:
            raise ScenarioError(f"mixing = {mixing!r} is not a mixing matrix; allowed: {', '.join(MIXINGS)}")
        if not 0 < share < 1:
            raise ScenarioError(f"share = {share!r} is out of range; allowed: a number in (0, 1)")
        check_connected(topology, "push-sum topology")
        self.variant, self.mixing, self.share = variant, mixing, float(share)
        self.max_wakes = max_wakes
        self.weighted = weighted
        self.n_nodes = topology.number_of_nodes()
        # B in sparse form (O(edges) for any number of nodes): the topology's shared rows, whose probabilities each
        # init draws again (they live on as its targets' running sums), and the diagonal b_ii: 0 for the random
        # walk, 1/(deg + 1) for uniform, the rest of the row for Metropolis-Hastings
        ptr, nbr, prob = mixing_rows(topology, mixing)
        self._csr = (ptr, nbr)
        deg = np.diff(ptr).astype(np.float64)
        if mixing == "neighbour":
            self._diag = np.where(deg > 0, 0.0, 1.0)
        elif mixing == "uniform":
            self._diag = 1.0 / (deg + 1.0)
        else:
            sums = segment_cumsum(ptr, prob)
            self._diag = 1.0 - np.where(deg > 0, sums[np.maximum(ptr[1:] - 1, 0)], 0.0)

    def init(self, node_ids, node_data, seed):
        node_ids = np.asarray(node_ids, dtype=np.int64)
        m = node_ids.shape[0]
        s0, w0 = _initial_values(node_ids, node_data, self.weighted)
        d = s0.shape[1]
        local_of = np.full(self.n_nodes, -1, dtype=np.int64)
        local_of[node_ids] = np.arange(m)
        # the hosted nodes' neighbours (CSR over local rows) and their tick targets: the neighbours and, where b_ii
        # > 0, the node itself (a tick without an exchange, slot -1), by node id, with the row's running sums
        ptr, all_nbr = self._csr
        all_prob = mixing_probabilities(ptr, all_nbr, self.mixing)
        counts = np.diff(ptr)[node_ids]
        if m == self.n_nodes and (node_ids == np.arange(m)).all():
            nbr_ptr, nbr, prob = ptr, all_nbr, all_prob          # every node, in order: the shared rows
        else:
            nbr_ptr = np.zeros(m + 1, dtype=np.int64)
            nbr_ptr[1:] = np.cumsum(counts)
            take = np.repeat(ptr[node_ids] - nbr_ptr[:-1], counts) + np.arange(nbr_ptr[-1])
            nbr, prob = all_nbr[take], all_prob[take]
        diag = self._diag[node_ids]
        selfish = np.flatnonzero(diag > 0)
        if selfish.shape[0]:
            row = np.concatenate([np.repeat(np.arange(m), counts), selfish])
            col = np.concatenate([nbr, node_ids[selfish]])
            order = np.lexsort((col, row))
            cand_ptr = np.zeros(m + 1, dtype=np.int64)
            cand_ptr[1:] = np.cumsum(counts + (diag > 0))
            cand_prob = np.concatenate([prob, diag[selfish]])[order]
            cand_node = col[order]
            cand_slot = np.concatenate([np.arange(nbr.shape[0]), np.full(selfish.shape[0], -1)])[order]
        else:                                    # no tick without an exchange: the targets are the neighbours
            cand_ptr, cand_prob, cand_node, cand_slot = nbr_ptr, prob, nbr, np.arange(nbr.shape[0])
        cand_cum = segment_cumsum(cand_ptr, cand_prob)
        cand_cum[cand_ptr[1:][cand_ptr[1:] > cand_ptr[:-1]] - 1] = 1.0    # every uniform in (0, 1) picks a target
        # the rows are read-only whether shared or not (one type for the compiled loop)
        nbr_ptr, nbr, cand_ptr, cand_node = (_read_only(a) for a in (nbr_ptr, nbr, cand_ptr, cand_node))
        edges = int(nbr_ptr[-1])
        running = self.variant == "running-sum"
        settings = np.zeros(1, SETTINGS)
        settings[0] = (VARIANTS.index(self.variant), -1 if self.max_wakes is None else int(self.max_wakes), d, 0, m,
                       self.share)
        arrays = PushSumArrays(
            local_of=local_of, s0=s0, w0=w0, s=s0.copy(), w=w0.copy(),
            sigma=np.zeros((edges if running else 0, d + 1)), rho=np.zeros((edges if running else 0, d + 1)),
            nbr_ptr=nbr_ptr, nbr=nbr, cand_ptr=cand_ptr, cand_node=cand_node, cand_slot=cand_slot.astype(np.int64),
            cand_cum=cand_cum.astype(np.float64), target_key=stream_keys(seed, STREAM_PROGRAM, self.n_nodes)[node_ids],
            counts=np.zeros(m, NODE_COUNTS), settings=settings)
        return PushSumState(node_ids, arrays, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                            np.zeros((1, d + 1)), tag_widths(d))

    def _emit(self, state: PushSumState, out: Outbox, node: int, n_out: int) -> None:
        for k in range(n_out):
            tag = int(state.out_tag[k])
            out.send(MessageBatch(TAGS[tag], np.array([node], dtype=np.int64), state.out_dst[k:k + 1].copy(),
                                  state.out_pay[k:k + 1, :state.widths[tag]].copy()))

    def wake(self, state: PushSumState, nodes, times):
        out = Outbox()
        done = False
        for node, t in zip(np.asarray(nodes).tolist(), np.asarray(times).tolist()):
            n_out, done = pushsum_wake(state.arrays, node, t, state.out_dst, state.out_tag, state.out_pay)
            self._emit(state, out, node, n_out)
        out.signals = {"done": bool(done)}
        return state, out

    def receive(self, state: PushSumState, batch: MessageBatch, times):
        out = Outbox()
        done = False
        tag = _TAG_ID.get(batch.tag)
        if tag is None:
            raise ScenarioError(f"push-sum received a message with tag {batch.tag!r}; it knows {', '.join(TAGS)}")
        rows = np.ascontiguousarray(batch.rows(), dtype=np.float64)
        for i, (src, dst, t) in enumerate(zip(batch.src.tolist(), batch.dst.tolist(), np.asarray(times).tolist())):
            n_out, done = pushsum_receive(state.arrays, dst, src, tag, rows[i], t, state.out_dst, state.out_tag,
                                          state.out_pay)
            self._emit(state, out, dst, n_out)
        out.signals = {"done": bool(done)}
        return state, out

    def recover(self, state: PushSumState, nodes, keep_state):
        for node in np.asarray(nodes).tolist():
            pushsum_recover(state.arrays, node, keep_state)
        return state

    def kernel(self, state: PushSumState) -> GossipKernel:
        return GossipKernel(arrays=state.arrays, wake=pushsum_wake, receive=pushsum_receive, tags=TAGS,
                            widths=state.widths, max_out=1, recover=pushsum_recover, prefetch=pushsum_prefetch)

    def observe(self, state: PushSumState) -> dict:
        obs = self.peek(state)
        obs.update(node_ids=obs["node_ids"].copy(), s=obs["s"].copy(), w=obs["w"].copy())
        return obs

    def hand_over(self, state: PushSumState) -> dict:
        """`peek` with the state's own s and w, writable, marked ``handed_over``: the run is over, and the model
        divides s by w in place (no third N x d array: 1 KB a node at d = 123)."""
        return {**self.peek(state), "s": state.arrays.s, "w": state.arrays.w, "handed_over": True}

    def peek(self, state: PushSumState) -> dict:
        """`observe` with read-only views of the nodes' s and w (no copy: 1 KB a node at d = 123)."""
        a = state.arrays
        s, sigma, rho, counts = a.s, a.sigma, a.rho, a.counts
        return {"node_ids": frozen_view(state.node_ids), "s": frozen_view(s), "w": frozen_view(a.w),
                "s0": frozen_view(a.s0), "w0": frozen_view(a.w0),
                "edge_mass": sigma.sum(axis=0) - rho.sum(axis=0) if sigma.shape[0] else np.zeros(s.shape[1] + 1),
                "sent": np.array([counts[f].sum() for f in SENT_FIELDS], dtype=np.int64),
                "wakes": int(counts["wakes"].sum()), "received": int(counts["received"].sum())}


def _read_only(a: np.ndarray) -> np.ndarray:
    """`a` as int64, read-only (the array itself where it is int64 already)."""
    a = np.asarray(a, dtype=np.int64)
    a.flags.writeable = False
    return a


def mass(observations: list[dict]) -> tuple[np.ndarray, float]:
    """(sum of s, sum of w) over the observed groups' nodes, plus what the running-sum edge totals still owe
    (sum sigma - sum rho). For pushsum add the messages in flight to get the conserved total."""
    s = sum(o["s"].sum(axis=0) + o["edge_mass"][:-1] for o in observations)
    w = sum(float(o["w"].sum()) + float(o["edge_mass"][-1]) for o in observations)
    return s, w


# ----------------------------------------------------------------------------------------------------------------
# Scenario algorithm
# ----------------------------------------------------------------------------------------------------------------


def _values(params: PushSumParams, problem, n: int) -> tuple[list, int]:
    """Per-node data and the dimension d."""
    from ...data import partition

    if params.values == "random":                      # the data set is not read
        rng = np.random.default_rng([problem.seed, 0x5EED])
        return NodeRows(value=rng.standard_normal((n, params.dim))), params.dim
    ds = problem.dataset
    if n > ds.n:
        raise InfeasibleParameterError(f"pushsum with values = \"data_mean\" gives each of the {n} nodes its mean "
                                       f"training point, but {ds.name} has {ds.n} points; allowed: at most {ds.n} "
                                       "nodes, or values = \"random\"")
    parts = partition(ds.y, n, problem.partition_scheme, seed=problem.seed, **problem.partition_params)
    empty = [i for i, idx in enumerate(parts) if len(idx) == 0]
    if empty:
        _node_value(empty[0], {"X": np.zeros((0, ds.d))}, params.weighted)     # its clear error
    # each node's value is its points' mean (weighted: their sum, with their count as its weight), all nodes in one
    # compiled pass (no slice of the data per node)
    totals = part_row_sums(ds.X, parts)
    counts = np.array([len(idx) for idx in parts], dtype=np.float64)
    if params.weighted:
        return NodeRows(value=totals, weight=counts), ds.d
    return NodeRows(value=totals / counts[:, None]), ds.d


def build_pushsum(params: PushSumParams, problem):
    from ...deployment import Deployment

    if problem.topology is not None:
        G = problem.topology
        if "nodes" in params.model_fields_set and G.number_of_nodes() != params.nodes:
            raise TopologyError(f"pushsum: nodes = {params.nodes} but the given graph has {G.number_of_nodes()} "
                                "nodes; allowed: leave nodes out, or make it match")
    else:
        G = build_topology(problem.topology_kind, params.nodes, seed=problem.seed, **problem.topology_params)
    check_connected(G, "push-sum topology")
    n = G.number_of_nodes()
    node_data, d = _values(params, problem, n)
    program = PushSum(G, params.variant, params.mixing, params.share, params.max_wakes, params.weighted)
    s0, w0 = _initial_values(np.arange(n), node_data, params.weighted)
    target = s0.sum(axis=0) / w0.sum()
    # the initial spread max_i ||s0_i / w0_i - target|| (every w0_i > 0), one compiled pass with np.linalg.norm's
    # bits: no whole-array temporaries (two N x d arrays)
    spread = float(np.max(_consensus_distances(s0, w0, target)))
    scale = spread if spread > 0 else 1.0
    widths = tag_widths(d)

    def gathered(obs) -> tuple[np.ndarray, np.ndarray, bool]:
        """(s, w) of every node in node order, and whether s is the caller's to overwrite (a new array, or a state
        handed over)."""
        groups = obs["peer"]
        if len(groups) == 1 and groups[0]["node_ids"].shape[0] == n and (groups[0]["node_ids"] == np.arange(n)).all():
            return groups[0]["s"], groups[0]["w"], groups[0].get("handed_over", False)   # in node order: no copy
        ids = np.concatenate([o["node_ids"] for o in groups])
        order = np.argsort(ids)
        s = np.concatenate([o["s"] for o in groups])[order]
        w = np.concatenate([o["w"] for o in groups])[order]
        return s, w, True

    def estimates(s, w, in_place: bool):
        """s_i / w_i per node (NaN where w_i <= 0), in one array (in s's own with `in_place`; no temporaries of
        every node's row)."""
        est = s if in_place else np.empty_like(s)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(s, w[:, None], out=est)
        est[~(w > 0)] = np.nan
        return est

    def evaluate(obs):
        s, w, _ = gathered(obs)
        err = _consensus_distances(s, w, target)
        return {"consensus_error": float(err.max()) / scale,
                "consensus_rms": float(np.sqrt(np.mean(err ** 2))) / scale,
                "objective": float(np.sqrt(np.mean(err ** 2))) / scale,
                "weight_at_nodes": float(w.sum() / w0.sum()),
                "wakes": sum(o["wakes"] for o in obs["peer"])}

    def declared(obs):
        return int(sum(int(o["sent"] @ widths) for o in obs["peer"]))

    def model(obs):
        est = estimates(*gathered(obs))
        # np.nanmean copies every row to zero its NaNs; without NaNs np.mean is the same sum over the same count
        average = np.nanmean(est, axis=0) if _has_nan(est) else np.mean(est, axis=0)
        return {"target": target, "estimates": est, "average": average}

    info = {"nodes": n, "d": int(d), "variant": params.variant, "mixing": params.mixing, "share": params.share,
            "scalars_per_message": {t: int(w) for t, w in zip(TAGS, widths)}, "scheduler": "gossip",
            "initial_spread": spread, **gossip_topology_info(G, params.mixing, params.share)}
    return Deployment(roles=[RoleSpec("peer", program, np.arange(n, dtype=np.int64), node_data)], topology=G,
                      node_names=NodeNames("peer-", n), evaluate=evaluate, declared_scalars=declared,
                      comm_unit=("messages (d+1 scalars)", float(d + 1)), model=model, info=info)


def _has_nan(a: np.ndarray, rows: int = 8192) -> bool:
    """Whether `a` holds a NaN, looked for `rows` rows at a time (no mask of the whole array)."""
    return any(np.isnan(a[i:i + rows]).any() for i in range(0, a.shape[0], rows))


@numba.njit(cache=True, nogil=True)
def _consensus_distances_into(s, w, target, err):
    """err[i] = ||s_i / w_i - target|| (inf where w_i <= 0 or the distance is not finite), one pass over the rows:
    each row's quotient, difference and square as NumPy's whole-array operations, summed in NumPy's pairwise order
    (np.linalg.norm's), so the same bits without a temporary of every row (100 MB at 10^5 nodes). Serial: numba's
    OpenMP threads would end any process that forks after a run (a forked child may not use them)."""
    d = s.shape[1]
    squares = np.empty(d)
    for i in range(s.shape[0]):
        wi = w[i]
        if not wi > 0:
            err[i] = np.inf
            continue
        for q in range(d):
            e = s[i, q] / wi - target[q]
            squares[q] = e * e
        dist = np.sqrt(pairwise_sum(squares, 0, d))
        err[i] = dist if np.isfinite(dist) else np.inf


def _consensus_distances(s: np.ndarray, w: np.ndarray, target: np.ndarray) -> np.ndarray:
    """||s_i / w_i - target|| per node (inf where w_i <= 0 or the distance is not finite)."""
    err = np.empty(s.shape[0])
    _consensus_distances_into(np.ascontiguousarray(s, dtype=np.float64), np.ascontiguousarray(w, dtype=np.float64),
                              np.ascontiguousarray(target, dtype=np.float64), err)
    return err


#: the memory model of a Push-Sum run (bytes), fitted to peaks measured on random k-out overlays (10^4, 10^5 and
#: 3·10^5 nodes with k = 2 and d = 4, 64 and 123; 10^5 and 3·10^5 nodes with k = 6 and d = 64; every one within
#: 2 %): the interpreter with numba and the libraries; per node (the program's and the loop's arrays, the sparse
#: eigensolver's vectors, the ledger's rows); per node and scalar of its value (the initial values and s: 2 x 8
#: bytes; the final model's estimates are s divided in place); per edge (the edge array, one shared copy of the
#: neighbour lists, the targets' running sums, the meter's edge counters, the ledger's edge rows). A built
#: topology holds no networkx dicts (`core.array_graph`); a graph the user passes holds its own.
BASE_BYTES, NODE_BYTES, NODE_SCALAR_BYTES, EDGE_BYTES = 204 * 2 ** 20, 250, 16, 230


def topology_size(problem, nodes: int) -> tuple[int, int]:
    """(nodes, undirected edges) of the run's topology, without building it."""
    from ...topology import expected_edges

    if problem.topology is not None:
        return problem.topology.number_of_nodes(), problem.topology.number_of_edges()
    return nodes, expected_edges(problem.topology_kind, nodes, problem.topology_params)


def pushsum_memory(params: PushSumParams, problem) -> tuple[int, str, str]:
    """The peak memory of a Push-Sum run, before it is built (`AlgorithmInfo.memory`)."""
    n, edges = topology_size(problem, params.nodes)
    d = (params.dim if params.values == "random" else problem.dataset.d) + 1
    need = BASE_BYTES + n * (NODE_BYTES + NODE_SCALAR_BYTES * d) + edges * EDGE_BYTES
    if params.variant == "running-sum":            # running totals per directed edge, sent and received
        need += 2 * 2 * edges * d * 8
    return need, (f"{n:,} nodes holding {d} scalars each, {edges:,} edges of the {problem.topology_kind} topology"), \
        "fewer nodes, a shorter value (dim), or a sparser topology"
