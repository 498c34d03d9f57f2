"""Whether an array is a scipy sparse one, without importing scipy.

A scipy sparse matrix or array can only exist once ``scipy.sparse`` is imported, so a process that has not imported
it (the quickstart: iris, dense) has none, and the answer is False without paying for scipy's import (about a
quarter of a second, most of it NumPy's f2py that scipy's array-API layer pulls in)."""
from __future__ import annotations

import sys

__all__ = ["issparse"]


def issparse(x) -> bool:
    """``scipy.sparse.issparse(x)``, answered without importing scipy when it is not imported yet."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(x)
