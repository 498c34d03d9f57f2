"""Splitting a data set's indices across nodes, and random hold-out splits.

Every scheme returns a list of ``n_parts`` sorted int64 index arrays that together contain each index
``0..n-1`` exactly once, every part non-empty, and the result depends only on the inputs and ``seed``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from svmsim.errors import ScenarioError


def _labels_required(y, scheme):
    if y is None:
        raise ScenarioError(f"partition scheme '{scheme}' needs the labels y, not only the number of points")
    return y


def _near_equal_sizes(n, n_parts, rng):
    """Sizes differing by at most one, the larger ones given to randomly chosen parts."""
    sizes = np.full(n_parts, n // n_parts, dtype=np.int64)
    sizes[rng.permutation(n_parts)[: n % n_parts]] += 1
    return sizes


def _split_by_owner(owner, n_parts):
    """Turn an owner array (part id of each index) into a list of sorted index arrays."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n_parts)
    return [part.astype(np.int64) for part in np.split(order, np.cumsum(counts)[:-1])]


def _deal(sequence, sizes, n_parts):
    """Assign the indices in ``sequence`` to parts in blocks of ``sizes``."""
    owner = np.empty(sequence.size, dtype=np.int64)
    owner[sequence] = np.repeat(np.arange(n_parts), sizes)
    return _split_by_owner(owner, n_parts)


def iid(y, n_parts: int, rng: np.random.Generator, n: int | None = None):
    """Random shuffle, then near-equal sizes (differing by at most one)."""
    n = len(y) if n is None else n
    return _deal(rng.permutation(n), _near_equal_sizes(n, n_parts, rng), n_parts)


def stratified(y, n_parts: int, rng: np.random.Generator, n: int | None = None):
    """Near-equal sizes, and each class spread evenly: per part, every class count is within one of its share."""
    y = np.asarray(_labels_required(y, "stratified"))
    n = y.size
    # shuffle within classes, lay the classes one after another, and deal the sequence round-robin
    keys = rng.random(n)
    sequence = np.lexsort((keys, y))
    owner = np.empty(n, dtype=np.int64)
    owner[sequence] = rng.permutation(n_parts)[np.arange(n) % n_parts]
    return _split_by_owner(owner, n_parts)


def label_skew(y, n_parts: int, rng: np.random.Generator, n: int | None = None, skew: float = 0.5):
    """Label-skewed parts of near-equal size: part j's dominant class is the (j mod C)-th class (alternating).

    A fraction ``skew`` of every part is reserved for its dominant class and filled from that class while it
    lasts (shortfalls are spread evenly over the parts of that class); the remaining places are filled with
    the leftover points at random. ``skew = 0`` is i.i.d., ``skew = 1`` gives single-class parts when the
    class sizes allow it.
    """
    y = np.asarray(_labels_required(y, "label_skew"))
    if not isinstance(skew, (int, float, np.floating, np.integer)) or not 0.0 <= float(skew) <= 1.0:
        raise ScenarioError(f"partition scheme 'label_skew': skew = {skew!r} is out of range: it must lie in [0, 1]")
    n = y.size
    classes, y_idx = np.unique(y, return_inverse=True)
    sizes = _near_equal_sizes(n, n_parts, rng)
    reserved = np.floor(float(skew) * sizes).astype(np.int64)
    dominant = np.arange(n_parts) % classes.size
    owner = np.full(n, -1, dtype=np.int64)
    filled = np.zeros(n_parts, dtype=np.int64)
    for c in range(classes.size):  # loop over classes only
        members = rng.permutation(np.flatnonzero(y_idx == c))
        parts_c = np.flatnonzero(dominant == c)
        if parts_c.size == 0 or members.size == 0:
            continue
        slots = np.repeat(parts_c, reserved[parts_c])
        rank = np.concatenate([np.arange(r) for r in reserved[parts_c]]) if slots.size else slots
        slots = slots[np.argsort(rank, kind="stable")]  # round-robin over parts, so shortfalls are even
        take = min(slots.size, members.size)
        owner[members[:take]] = slots[:take]
        filled += np.bincount(slots[:take], minlength=n_parts)
    pool = rng.permutation(np.flatnonzero(owner < 0))
    owner[pool] = np.repeat(np.arange(n_parts), sizes - filled)
    return _split_by_owner(owner, n_parts)


def unequal(y, n_parts: int, rng: np.random.Generator, n: int | None = None, alpha: float = 1.0):
    """I.i.d. points, part sizes ``1 + Multinomial(n - n_parts, p)`` with ``p ~ Dirichlet(alpha, ..., alpha)``.

    Smaller ``alpha`` gives more unequal sizes; every part keeps at least one point.
    """
    if not isinstance(alpha, (int, float, np.floating, np.integer)) or not float(alpha) > 0:
        raise ScenarioError(f"partition scheme 'unequal': alpha = {alpha!r} is out of range: it must be > 0")
    n = len(y) if n is None else n
    p = rng.dirichlet(np.full(n_parts, float(alpha)))
    sizes = 1 + rng.multinomial(n - n_parts, p)
    return _deal(rng.permutation(n), sizes, n_parts)


#: Partition schemes by name, for :func:`partition` and the CLI's listing.
PARTITION_SCHEMES: dict[str, Callable] = {
    "iid": iid,
    "stratified": stratified,
    "label_skew": label_skew,
    "unequal": unequal,
}

_SCHEME_PARAMS = {"iid": (), "stratified": (), "label_skew": ("skew",), "unequal": ("alpha",)}


def partition(y, n_parts: int, scheme: str = "iid", seed: int = 0, **params) -> list[np.ndarray]:
    """Split the indices ``0..n-1`` into ``n_parts`` non-empty, disjoint, sorted parts.

    ``y`` is the label array (``iid`` and ``unequal`` also accept the number of points ``n`` instead).
    Schemes (see :data:`PARTITION_SCHEMES`): ``iid``; ``stratified``; ``label_skew`` (param ``skew`` in
    [0, 1], default 0.5); ``unequal`` (param ``alpha`` > 0, default 1). Raises :class:`ScenarioError` for an
    unknown scheme or parameter, or ``n_parts`` outside ``1..n``.
    """
    if scheme not in PARTITION_SCHEMES:
        raise ScenarioError(
            f"unknown partition scheme {scheme!r}: the allowed schemes are {', '.join(sorted(PARTITION_SCHEMES))}"
        )
    unknown = sorted(set(params) - set(_SCHEME_PARAMS[scheme]))
    if unknown:
        allowed = ", ".join(_SCHEME_PARAMS[scheme]) or "none"
        raise ScenarioError(
            f"partition scheme '{scheme}' has no parameter {', '.join(unknown)}: its parameters are {allowed}"
        )
    if np.ndim(y) == 0 and isinstance(y, (int, np.integer)):
        n, labels = int(y), None
    else:
        labels = np.asarray(y).ravel()
        n = labels.size
    if isinstance(n_parts, bool) or not isinstance(n_parts, (int, np.integer)) or not 1 <= n_parts <= n:
        raise ScenarioError(
            f"n_parts = {n_parts!r} is out of range: it must be an integer from 1 to the number of points n = {n}"
        )
    rng = np.random.default_rng(seed)
    return PARTITION_SCHEMES[scheme](labels, int(n_parts), rng, n=n, **params)


def train_test_split_indices(n: int, test_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random hold-out: ``(train_idx, test_idx)``, sorted, with ``round(n * test_fraction)`` test points (at least 1).

    E.g. the paper holds out 10% of phishing: ``train_test_split_indices(11055, 0.1, seed)``.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ScenarioError(f"hold-out split: n = {n!r} is invalid: it must be an integer >= 2")
    if not isinstance(test_fraction, (int, float, np.floating)) or not 0.0 < float(test_fraction) < 1.0:
        raise ScenarioError(f"hold-out split: test_fraction = {test_fraction!r} is out of range: it must lie in (0, 1)")
    n_test = int(min(n - 1, max(1, round(n * float(test_fraction)))))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)
