"""Splitting a data set's indices across nodes, and random hold-out splits.

Every scheme returns a list of ``n_parts`` sorted int64 index arrays that together contain each index
``0..n-1`` exactly once, every part non-empty, and the result depends only on the inputs and ``seed``.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

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

    Key: ``skew``, the fraction of every part reserved for its dominant class; allowed: a number in [0, 1]
    (default 0.5).
    """
    y = np.asarray(_labels_required(y, "label_skew"))
    if not isinstance(skew, (int, float, np.floating, np.integer)) or not 0.0 <= float(skew) <= 1.0:
        raise ScenarioError(f"partition scheme 'label_skew': skew = {skew!r} is out of range; allowed: a number in [0, 1]")
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

    Key: ``alpha``, the Dirichlet concentration of the part sizes (1: every split of the sizes equally likely;
    100: nearly equal sizes; 0.1: a few large parts); allowed: a number > 0 (default 1.0).
    """
    if not isinstance(alpha, (int, float, np.floating, np.integer)) or not float(alpha) > 0:
        raise ScenarioError(f"partition scheme 'unequal': alpha = {alpha!r} is out of range; allowed: a number > 0")
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

_SCHEME_ARGS = ("y", "n_parts", "rng", "n")
_BUILTIN = frozenset(PARTITION_SCHEMES)


def scheme_params(scheme: Callable) -> dict[str, Any]:
    """A scheme's own keyword parameters (besides y, n_parts, rng, n), mapped to their defaults."""
    sig = inspect.signature(scheme)
    return {name: p.default for name, p in sig.parameters.items() if name not in _SCHEME_ARGS}


def register_partition(name: str, scheme: Callable) -> Callable:
    """Make a partition scheme known to scenarios (``[partition] scheme``, its keyword parameters as keys beside
    it) and `partition`; returns it. ``scheme(y, n_parts, rng, n=None, **params) -> list of index arrays``.

    A plugin calls it when its module is imported (entry-point group ``svmsim.partitions``, the entry point named
    after the scheme); the entry point may also name the function itself (registered under its name)."""
    from ..errors import PluginError

    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"partition scheme name {name!r} is not a name; allowed: letters, digits and '_'")
    if not callable(scheme) or any(a not in inspect.signature(scheme).parameters for a in ("y", "n_parts", "rng")):
        raise PluginError(f"partition scheme {name!r}: {scheme!r} is not a scheme; allowed: a function "
                          "scheme(y, n_parts, rng, n=None, **params) returning one index array per part")
    old = PARTITION_SCHEMES.get(name)
    if old is not None and old is not scheme and old.__module__ != scheme.__module__:
        raise PluginError(f"partition scheme {name!r} is registered twice: by module {old.__module__} and by "
                          f"module {scheme.__module__}; allowed: a name of its own for each scheme")
    PARTITION_SCHEMES[name] = scheme
    return scheme


def partition_schemes() -> list[str]:
    """Every scheme a scenario may name: built in, registered, and installed plugins' (none imported)."""
    from ..core.plugins import entry_points

    return list(PARTITION_SCHEMES) + sorted(set(entry_points("partitions")) - set(PARTITION_SCHEMES))


def partition_scheme(name: str) -> Callable | None:
    """The scheme `name`, loading its plugin on first use; None for a scheme nothing provides."""
    if isinstance(name, str) and name not in PARTITION_SCHEMES:
        from ..core.plugins import entry_points, provide

        if name in entry_points("partitions"):
            provide("partitions", name, lambda f: register_partition(f.__name__, f),
                    lambda k: k in PARTITION_SCHEMES, type(iid))
    return PARTITION_SCHEMES.get(name) if isinstance(name, str) else None


def partition(y, n_parts: int, scheme: str = "iid", seed: int = 0, **params) -> list[np.ndarray]:
    """Split the indices ``0..n-1`` into ``n_parts`` non-empty, disjoint, sorted parts.

    ``y`` is the label array (``iid`` and ``unequal`` also accept the number of points ``n`` instead).
    Schemes (see :data:`PARTITION_SCHEMES`): ``iid``; ``stratified``; ``label_skew`` (param ``skew`` in
    [0, 1], default 0.5); ``unequal`` (param ``alpha`` > 0, default 1). Raises :class:`ScenarioError` for an
    unknown scheme or parameter, or ``n_parts`` outside ``1..n``.
    """
    fn = partition_scheme(scheme)
    if fn is None:
        raise ScenarioError(
            f"unknown partition scheme {scheme!r}: the allowed schemes are {', '.join(sorted(partition_schemes()))}"
        )
    unknown = sorted(set(params) - set(scheme_params(fn)))
    if unknown:
        allowed = ", ".join(scheme_params(fn)) or "none"
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
    parts = fn(labels, int(n_parts), rng, n=n, **params)
    if scheme not in _BUILTIN:                 # a plugin's result: n_parts sorted, disjoint, non-empty parts of 0..n-1
        _check_parts(scheme, parts, int(n_parts), n)
    return parts


def _check_parts(scheme: str, parts, n_parts: int, n: int) -> None:
    why = None
    if not isinstance(parts, (list, tuple)) or len(parts) != n_parts:
        why = f"it gave {type(parts).__name__} of {len(parts) if hasattr(parts, '__len__') else '?'} parts"
    else:
        arrays = [np.asarray(p) for p in parts]
        if any(a.ndim != 1 or a.dtype.kind not in "iu" or a.size == 0 for a in arrays):
            why = "a part is empty or not a 1-D integer array"
        elif any(np.any(np.diff(a) <= 0) for a in arrays):
            why = "a part is not sorted or repeats an index"
        else:
            every = np.concatenate(arrays)
            if every.size != n or every.min() < 0 or every.max() >= n or np.unique(every).size != n:
                why = f"the parts do not cover the indices 0..{n - 1} exactly once"
    if why:
        raise ScenarioError(f"partition scheme {scheme!r} returned an invalid split: {why}; allowed: {n_parts} "
                            f"sorted, disjoint, non-empty index arrays that together hold 0..{n - 1}")


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
