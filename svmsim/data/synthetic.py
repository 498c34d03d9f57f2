"""Synthetic binary classification data around a random hyperplane (after Appendix D of the Saddle-SVC paper).

All generators are vectorised and deterministic given ``seed`` (``numpy.random.default_rng``). Every point lies
in the unit ball, and both classes are always non-empty.

Geometry shared by the dense generators: a random unit normal ``u`` and an offset ``b`` drawn uniformly from
[-0.3, 0.3] define the plane ``H = {x : u.x = b}``, which cuts the unit ball. With ``D = 1 - |b|`` each point
gets a side (+1/-1, each with probability 1/2), a distance to ``H`` drawn uniformly from ``[beta*D, D]`` (the
smallest distance is set to exactly ``beta*D`` and the largest to exactly ``D``, so min/max distance = beta),
and a uniformly random position inside the slice of the unit ball parallel to ``H`` at that distance.

The sparse generators import scipy when they run: a scenario's ``[data]`` keys are checked against the
generators' signatures (`SYNTHETIC_KINDS`), and validating one imports no scipy.
"""

from __future__ import annotations

import math

import numpy as np

from svmsim.errors import ScenarioError

#: Largest |offset| of the random hyperplane from the origin.
MAX_OFFSET = 0.3


def _check_size(n, d, min_n=2, density=1.0):
    """n and d as ints; a ScenarioError when they are not, or when the set (n rows of about density*d stored
    values, plus d-vectors) would not fit in this machine's memory with room for the generator's temporaries."""
    if int(n) != n or n < min_n:
        raise ScenarioError(f"synthetic data: n = {n!r} is invalid: it must be an integer >= {min_n}")
    if int(d) != d or d < 1:
        raise ScenarioError(f"synthetic data: d = {d!r} is invalid: it must be an integer >= 1")
    n, d = int(n), int(d)
    stored = n * max(1, round(density * d)) + d
    need, have = _BYTES_WITH_TEMPORARIES * stored, _machine_memory()
    if need > have:
        raise ScenarioError(
            f"synthetic data: n = {n:,} and d = {d:,} make {stored:,} stored values, which need about "
            f"{need / 2**30:,.1f} GiB to generate; this machine has {have / 2**30:,.1f} GiB; allowed: "
            f"n * density * d up to about {have // _BYTES_WITH_TEMPORARIES:,} (reduce n or d)")
    return n, d


#: bytes per stored value while a set is generated: float64 data plus about two temporaries of the same size
_BYTES_WITH_TEMPORARIES = 24


def _machine_memory() -> int:
    from svmsim.core.resources import machine_memory

    return machine_memory()


def _check_unit(name, value, lo_open=False):
    lo_ok = value > 0 if lo_open else value >= 0
    if not (lo_ok and value <= 1):
        rng = "(0, 1]" if lo_open else "[0, 1]"
        raise ScenarioError(f"synthetic data: {name} = {value!r} is out of range: it must lie in {rng}")
    return float(value)


def _balanced_signs(n, rng):
    """Random ±1 vector with P(+1) = 1/2 and at least one of each sign (n >= 2)."""
    n_pos = int(np.clip(rng.binomial(n, 0.5), 1, n - 1))
    signs = np.concatenate([np.ones(n_pos), -np.ones(n - n_pos)])
    return rng.permutation(signs)


def _random_unit(d, rng):
    u = rng.standard_normal(d)
    return u / np.linalg.norm(u)


def _plane_sample(n, d, beta, rng):
    """Points in the unit ball on both sides of a random plane, distances in [beta*D, D]; see module doc."""
    u = _random_unit(d, rng)
    b = float(rng.uniform(-MAX_OFFSET, MAX_OFFSET))
    D = 1.0 - abs(b)
    side = _balanced_signs(n, rng)
    dist = rng.uniform(beta * D, D, size=n)
    order = rng.permutation(n)
    dist[order[0]] = beta * D  # pin the extremes so that min/max distance is exactly beta
    dist[order[1]] = D
    t = b + side * dist  # coordinate along u; |t| <= 1 because D = 1 - |b|
    X = t[:, None] * u[None, :]
    if d > 1:
        G = rng.standard_normal((n, d))
        G -= (G @ u)[:, None] * u[None, :]
        G /= np.linalg.norm(G, axis=1, keepdims=True)
        radius = np.sqrt(np.clip(1.0 - t**2, 0.0, None)) * rng.random(n) ** (1.0 / (d - 1))
        X += radius[:, None] * G
    info = {"normal": u, "offset": b, "D": D, "min_distance": beta * D, "max_distance": D}
    return X, side, dist, info


def _randomise_band(y, dist, band, rng):
    """Give points with ``dist < band`` a random ±1 label; keep both classes non-empty."""
    in_band = dist < band
    y = y.copy()
    y[in_band] = rng.choice(np.array([-1.0, 1.0]), size=int(in_band.sum()))
    if np.all(y == y[0]):  # only possible for tiny n: flip the point nearest to the plane
        y[int(np.argmin(dist))] = -y[0]
    return y, int(in_band.sum())


def make_separable(n: int, d: int, beta: float = 0.1, seed: int = 0, return_info: bool = False):
    """Linearly separable data: ``(X, y)`` with ``X`` dense float64 ``(n, d)`` and ``y`` in {-1, +1}.

    The label is the side of the random plane ``H``; distances to ``H`` lie in ``[beta*D, D]`` with
    min/max exactly ``beta``, so the classes are separated by a slab of width ``2*beta*D`` around ``H``.
    With ``return_info=True`` a third value, a dict with ``normal``, ``offset``, ``D``, ``min_distance`` and
    ``max_distance``, is returned.
    """
    n, d = _check_size(n, d)
    beta = _check_unit("beta", beta, lo_open=True)
    rng = np.random.default_rng(seed)
    X, side, _, info = _plane_sample(n, d, beta, rng)
    return (X, side, info) if return_info else (X, side)


def make_nonseparable(
    n: int, d: int, beta: float = 0.0, flip_band: float = 0.1, seed: int = 0, return_info: bool = False
):
    """Non-separable data: as :func:`make_separable`, but points closer than ``flip_band`` to ``H`` get a random label.

    The distances are drawn from ``[beta*D, D]`` as in the separable case. The default ``beta = 0`` lets the
    distances start at the plane, so about ``flip_band / D`` of the points fall into the band and get a label
    of +1 or -1 with probability 1/2 each (``beta*D >= flip_band`` would leave the band empty and the data
    separable). ``info["n_in_band"]`` counts the randomised points.
    """
    n, d = _check_size(n, d)
    beta = _check_unit("beta", beta)
    flip_band = _check_unit("flip_band", flip_band)
    rng = np.random.default_rng(seed)
    X, side, dist, info = _plane_sample(n, d, beta, rng)
    y, n_band = _randomise_band(side, dist, flip_band, rng)
    info.update(flip_band=flip_band, n_in_band=n_band)
    return (X, y, info) if return_info else (X, y)


def make_sparse_nonseparable(
    n: int, d: int, density: float, flip_band: float = 0.1, seed: int = 0, return_info: bool = False
):
    """Sparse non-separable data: ``(X, y)`` with ``X`` a CSR matrix whose rows have ``round(density*d)`` non-zeros.

    Each row gets a uniformly random support of ``k = max(1, round(density*d))`` coordinates and values
    uniform in the unit ball of that support. A random unit normal ``u`` and an offset ``b`` at a random
    quantile (30%-70%) of the projections ``X @ u`` define the plane; the label is the side. Since sparse
    points sit close to any dense plane, the random-label band is relative here: points whose distance to
    the plane is below ``flip_band * D`` (``D`` = largest distance) get a random label.
    """
    density = _check_unit("density", density, lo_open=True)
    n, d = _check_size(n, d, density=density)
    flip_band = _check_unit("flip_band", flip_band)
    rng = np.random.default_rng(seed)
    k = int(min(d, max(1, round(density * d))))
    X = _sparse_rows(n, d, k, rng)
    u = _random_unit(d, rng)
    proj = X @ u
    b = float(np.quantile(proj, rng.uniform(0.3, 0.7)))
    signed = proj - b
    side = np.where(signed > 0, 1.0, -1.0)
    if np.all(side == side[0]):
        side[int(np.argmin(np.abs(signed)))] = -side[0]
    dist = np.abs(signed)
    D = float(dist.max())
    y, n_band = _randomise_band(side, dist, flip_band * D, rng)
    info = {"normal": u, "offset": b, "D": D, "nnz_per_row": k, "flip_band": flip_band, "n_in_band": n_band}
    return (X, y, info) if return_info else (X, y)


def _sparse_rows(n: int, d: int, k: int, rng) -> "scipy.sparse.csr_matrix":
    """n rows with k non-zeros each on a uniformly random support, values uniform in the unit ball of it."""
    import scipy.sparse as sp

    indices = np.empty((n, k), dtype=np.int32)
    chunk = max(1, (1 << 22) // d)
    for start in range(0, n, chunk):  # loop over blocks of rows only, to bound memory
        stop = min(n, start + chunk)
        keys = rng.random((stop - start, d))
        indices[start:stop] = np.sort(np.argpartition(keys, k - 1, axis=1)[:, :k], axis=1)
    G = rng.standard_normal((n, k))
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    G *= (rng.random(n) ** (1.0 / k))[:, None]
    return sp.csr_matrix((G.ravel(), indices.ravel(), np.arange(n + 1) * k), shape=(n, d))


def make_tiny_margin(n: int, d: int, density: float = 0.05, positive_fraction: float = 0.03,
                     max_norm: float = 10.0, seed: int = 0, return_info: bool = False):
    """Sparse, imbalanced, separable data with a tiny margin and uneven row norms: the awkward shape on which a
    solver's defaults meet a tiny OPT (hull distance relative to the largest row norm). ``X`` is CSR with
    ``round(density*d)`` non-zeros per row (as :func:`make_sparse_nonseparable`), each row then scaled by a factor
    uniform in [1, max_norm]; the +1 class is then the top ``positive_fraction`` of the projections on a random unit
    normal u, so the classes are separated by a plane with nothing but the quantile's spacing as margin.
    ``info``: normal, threshold, margin (half the gap between the classes' projections).
    """
    import scipy.sparse as sp

    density = _check_unit("density", density, lo_open=True)
    positive_fraction = _check_unit("positive_fraction", positive_fraction, lo_open=True)
    n, d = _check_size(n, d, density=density)
    if not (max_norm >= 1 and math.isfinite(max_norm)):
        raise ScenarioError(f"synthetic data: max_norm = {max_norm!r} is out of range: it must be a number >= 1")
    rng = np.random.default_rng(seed)
    X = _sparse_rows(n, d, int(min(d, max(1, round(density * d)))), rng)
    X = sp.csr_matrix(sp.diags(rng.uniform(1.0, float(max_norm), n)) @ X)
    u = _random_unit(d, rng)
    proj = np.asarray(X @ u).ravel()
    n_pos = min(n - 1, max(1, round(positive_fraction * n)))
    order = np.argsort(proj, kind="stable")
    y = -np.ones(n)
    y[order[n - n_pos:]] = 1.0
    info = {"normal": u, "threshold": 0.5 * (proj[order[n - n_pos - 1]] + proj[order[n - n_pos]]),
            "margin": 0.5 * (proj[order[n - n_pos]] - proj[order[n - n_pos - 1]])}
    return (X, y, info) if return_info else (X, y)


def make_awkward_sparse(n: int, d: int, density: float = 0.1, zero_rows: float = 0.05, duplicates: float = 0.05,
                        constant: float = 0.5, flip_band: float = 0.1, seed: int = 0, return_info: bool = False):
    """Sparse non-separable data with the shapes that real sparse sets (w8a, a9a, rcv1) have and clean generators
    lack: all-zero rows (Q_ii = 0 in the dual), exact duplicate rows and a constant feature.

    The rows are :func:`make_sparse_nonseparable`'s on ``d - 1`` columns (``d`` when ``constant = 0``) with labels
    from the same random plane; then ``round(zero_rows*n)`` of them lose every value (they keep their label),
    ``round(duplicates*n)`` rows are exact copies of other rows (same label) and, unless ``constant = 0``, the last
    column holds ``constant`` on every row that is not all-zero (a bias column, as one-hot encoded sets carry). The
    rows come in a random order. ``info``: zero_rows (their indices), duplicate_of (index pairs (copy, original)),
    constant_column (its index, or None), and the generator's plane.
    """
    import scipy.sparse as sp

    zero_rows = _check_unit("zero_rows", zero_rows)
    duplicates = _check_unit("duplicates", duplicates)
    if not (math.isfinite(constant)):
        raise ScenarioError(f"synthetic data: constant = {constant!r} is out of range: it must be a finite number")
    n, d = _check_size(n, d, min_n=4, density=density)
    with_constant = constant != 0
    if with_constant and d < 2:
        raise ScenarioError(f"synthetic data: d = {d} is invalid with a constant feature: it must be >= 2")
    n_dup = min(int(round(duplicates * n)), n - 2)
    n_base = n - n_dup
    X, y, info = make_sparse_nonseparable(n_base, d - 1 if with_constant else d, density, flip_band, seed,
                                          return_info=True)
    rng = np.random.default_rng([int(seed), 1])
    n_zero = min(int(round(zero_rows * n)), n_base - 2)
    zero = rng.choice(n_base, size=n_zero, replace=False)
    keep = np.ones(n_base, dtype=bool)
    keep[zero] = False
    X = sp.csr_matrix(sp.diags(keep.astype(np.float64)) @ X)
    X.eliminate_zeros()
    originals = rng.choice(np.flatnonzero(keep), size=n_dup, replace=True)
    X = sp.vstack([X, X[originals]]).tocsr()
    y = np.concatenate([y, y[originals]])
    nonzero = np.concatenate([keep, np.ones(n_dup, dtype=bool)])
    if with_constant:
        X = sp.hstack([X, sp.csr_matrix(np.where(nonzero, float(constant), 0.0)[:, None])]).tocsr()
        X.eliminate_zeros()
    order = rng.permutation(n)
    where = np.empty(n, dtype=np.int64)
    where[order] = np.arange(n)
    X, y = sp.csr_matrix(X[order]), y[order]
    X.sort_indices()
    info.update(zero_rows=np.sort(where[zero]),
                duplicate_of=np.stack([where[n_base + np.arange(n_dup)], where[originals]], axis=1),
                constant_column=(d - 1) if with_constant else None)
    return (X, y, info) if return_info else (X, y)


def make_bmrm_lower_bound(d: int = 64, zero_plane: bool = True, seed: int = 0, return_info: bool = False):
    """Paper 004's lower-bound instance for BMRM (section 3), corrected (notes-004 section 2.2, fix 2): the d
    planes a_i = the columns of H_d / sqrt(d) (Sylvester's Hadamard matrix, so orthonormal) with a zero plane,

        J(w) = max(0, max_i <a_i, w>) + lam/2 ||w||^2,      J* = J(0) = 0.

    As printed (A built from +-H_{d/2}) the columns come in antipodal pairs and BMRM solves it in two steps; with
    orthonormal columns and an oracle that picks an unused plane among the tied ones, BMRM's gap after t < d
    iterations is exactly 1/(2 lam t) (Theorems 6-7 with t < d for t < d/2).

    zero_plane = false gives fix 1 instead: J(w) = max_i <a_i, w> + lam/2 ||w||^2 (J* = -1/(2 lam d) at
    w = -(1/(lam d)) sum_i a_i), where BMRM's gap is the same 1/(2 lam t) and Pragam, started at w = 0, has a
    non-trivial optimum to approach (with the zero plane, w_0 = 0 is already optimal).

    Returned as a data set of d rows x_i = a_i with labels y_i = -1 and ``info["risk"] = "max_of_planes"``: the
    rows of M = -A with offsets b = 0 in paper 004's form R(w) = max_{alpha in Q2} <alpha, b - M w>. Only the
    bundle family (pragam, ls-bmrm, qp-bmrm) reads it as this instance; every other algorithm refuses it (one
    class)."""
    import scipy.sparse as sp
    from scipy.linalg import hadamard

    if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 2 or d & (d - 1):
        raise ScenarioError(f"bmrm_lower_bound: d = {d!r} is not allowed; allowed: a power of two >= 2 "
                            "(Sylvester's Hadamard matrix)")
    X = sp.csr_matrix(hadamard(int(d)).astype(np.float64) / np.sqrt(d))
    y = -np.ones(int(d))
    if not isinstance(zero_plane, bool):
        raise ScenarioError(f"bmrm_lower_bound: zero_plane = {zero_plane!r} is not allowed; allowed: true or false")
    info = {"risk": "max_of_planes", "zero_plane": zero_plane,
            "construction": "orthonormal H_d/sqrt(d)" + (" with a zero plane (notes-004 section 2.2, fix 2)"
                                                         if zero_plane else " (notes-004 section 2.2, fix 1)")}
    return (X, y, info) if return_info else (X, y)


def make_mnist_shaped(n: int, d: int = 784, positive_class: int = 8, noise: float = 0.3, seed: int = 0,
                      return_info: bool = False):
    """A stand-in for MNIST "8 vs. rest" (paper 003's MNIST task; the real set is not available here): dense
    ``(n, d)`` images with ``d`` a square (28 x 28 by default), pixels in [0, 1] and about half of them zero.

    Ten classes, drawn uniformly: each has a prototype image (three or four strokes from a pool of twelve shared by
    all classes, as digits share strokes) and six deformation images; a sample is its prototype at a random
    intensity plus a random combination of the deformations plus pixel noise, clipped to [0, 1], with faint pixels
    (< 0.1) set to zero. Label +1 for `positive_class` (about 10%:
    imbalanced, like "8 vs. rest"), -1 for the other nine. The classes overlap through the deformations, so a
    kernel separates them better than a plane."""
    n, d = _check_size(n, d)
    side = round(math.sqrt(d))
    if side * side != d:
        raise ScenarioError(f"mnist_shaped: d = {d} is not allowed; allowed: a square number (784 = 28 x 28)")
    if not (isinstance(positive_class, (int, np.integer)) and 0 <= positive_class <= 9):
        raise ScenarioError(f"mnist_shaped: positive_class = {positive_class!r}; allowed: an integer 0..9")
    noise = _check_unit("noise", noise)
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2) / side

    def strokes(count):
        img = np.zeros(d)
        for _ in range(count):
            centre = rng.uniform(0.2, 0.8, size=2)
            width = rng.uniform(0.04, 0.12)
            img += np.exp(-((grid - centre) ** 2).sum(axis=1) / (2 * width * width))
        return img / img.max()

    pool = np.stack([strokes(1) for _ in range(12)])        # digits share strokes, so classes overlap
    protos = np.stack([pool[rng.choice(12, size=int(rng.integers(3, 5)), replace=False)].sum(axis=0)
                       for _ in range(10)])
    protos /= protos.max(axis=1, keepdims=True)
    deform = np.stack([[strokes(2) - strokes(2) for _ in range(6)] for _ in range(10)])
    cls = rng.integers(0, 10, size=n)
    X = protos[cls] * rng.uniform(0.6, 1.0, size=(n, 1)) + np.einsum("nk,nkd->nd", rng.normal(0.0, 0.8, size=(n, 6)),
                                                                       deform[cls])
    X += noise * rng.standard_normal((n, d))
    X = np.clip(X, 0.0, 1.0)
    X[X < 0.1] = 0.0
    y = np.where(cls == positive_class, 1.0, -1.0)
    if np.all(y == y[0]):
        y[0] = -y[0]
    info = {"side": side, "positive_class": int(positive_class), "positive_fraction": float(np.mean(y > 0))}
    return (X, y, info) if return_info else (X, y)


#: Generator kinds addressable by name (``load_dataset("synthetic", kind=...)``).
SYNTHETIC_KINDS = {
    "separable": make_separable,
    "nonseparable": make_nonseparable,
    "sparse_nonseparable": make_sparse_nonseparable,
    "tiny_margin": make_tiny_margin,
    "awkward_sparse": make_awkward_sparse,
    "bmrm_lower_bound": make_bmrm_lower_bound,
    "mnist_shaped": make_mnist_shaped,
}
