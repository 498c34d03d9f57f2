"""The machine's resources, and the check that a run's estimated memory fits before anything of it is built."""
from __future__ import annotations

import os

from ..errors import InfeasibleParameterError

__all__ = ["machine_memory", "check_memory", "GIB"]

GIB = 2 ** 30


def machine_memory() -> int:
    """Physical memory in bytes (POSIX), or a very large number where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):       # pragma: no cover - non-POSIX systems
        return 2 ** 62


def check_memory(need: int, what: str, allowed: str) -> None:
    """Refuse a run whose estimated peak memory `need` (bytes) exceeds this machine's memory: one message naming
    the estimate, what it is made of (`what`), the machine's memory and what is allowed."""
    have = machine_memory()
    if need > have:
        raise InfeasibleParameterError(
            f"this run would need about {need / GIB:,.1f} GiB of memory ({what}); this machine has "
            f"{have / GIB:,.1f} GiB; allowed: {allowed}")
