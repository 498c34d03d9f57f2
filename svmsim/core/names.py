"""Node names that are made when read: ``NodeNames("peer-", n)`` is the sequence "peer-0", ..., "peer-{n-1}".

A run's ledger, meter and Ray dashboard name its nodes; a list of n Python strings costs about 70 bytes a node
(70 MB at 10^6 gossip nodes), and every copy of the list 8 more. A `NodeNames` holds a prefix and a number, cannot
change, reads like a list of strings (indexing, negative indices, slices as lists, iteration, ``len``, ``in``,
``index``, ``count``) and equals any list or tuple of the same names; it is not a list (``list(names)`` makes one,
for ``json.dumps`` or ``+``).
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

__all__ = ["NodeNames", "default_names"]


class NodeNames(Sequence):
    """The names ``f"{prefix}{i}"`` for i in 0 .. n - 1, made when read."""

    __slots__ = ("n", "prefix")

    def __init__(self, prefix: str, n: int):
        if not isinstance(prefix, str):
            raise TypeError(f"a name prefix must be a string, not {type(prefix).__name__}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"the number of names must be a whole number >= 0, not {n!r}")
        object.__setattr__(self, "prefix", prefix)
        object.__setattr__(self, "n", int(n))

    def __setattr__(self, name, value):
        raise AttributeError(f"NodeNames cannot change (a ledger keeps it as it is); {name!r} is read-only")

    def __delattr__(self, name):
        raise AttributeError(f"NodeNames cannot change (a ledger keeps it as it is); {name!r} is read-only")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [f"{self.prefix}{j}" for j in range(*i.indices(self.n))]
        j = operator.index(i)                      # a float or a string: TypeError, as a list's
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError(f"node name index {i} out of range for {self.n} names")
        return f"{self.prefix}{j}"

    def __iter__(self):
        prefix = self.prefix
        return (f"{prefix}{j}" for j in range(self.n))

    def __contains__(self, name) -> bool:
        return self.index_of(name) is not None

    def index_of(self, name) -> int | None:
        """The index of `name`, or None when it is not one of these names."""
        if not (isinstance(name, str) and name.startswith(self.prefix)):
            return None
        digits = name[len(self.prefix):]
        if not (digits.isascii() and digits.isdigit()) or (len(digits) > 1 and digits[0] == "0"):
            return None
        j = int(digits)
        return j if j < self.n else None

    def index(self, name, start: int = 0, stop: int | None = None) -> int:
        j = self.index_of(name)
        if j is None or j not in range(self.n)[start:stop]:
            raise ValueError(f"{name!r} is not among the names")
        return j

    def count(self, name) -> int:
        return int(name in self)

    def __eq__(self, other) -> bool:
        if isinstance(other, NodeNames):
            return self.n == other.n and (self.n == 0 or self.prefix == other.prefix)
        if isinstance(other, (list, tuple)):
            return len(other) == self.n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]  (equal to lists, which do not hash)

    def __repr__(self) -> str:
        return f"NodeNames({self.prefix!r}, {self.n})"

    def __reduce__(self):
        return NodeNames, (self.prefix, self.n)


def default_names(n_nodes: int) -> NodeNames:
    """The names of nodes that were given none: their ids as strings ("0", "1", ...)."""
    return NodeNames("", n_nodes)
