"""The run's wall-clock budget (``[stop] max_seconds``), counted from the moment the run starts: set-up (data, the
reference optimum, the build) spends it too. The runner opens it (`open_budget`); a long set-up step (a reference
solver) asks `expired` between its epochs and gives up, naming the budget, instead of running past it; the
schedulers get what is left (`remaining`). Outside a run nothing is open and nothing expires."""
from __future__ import annotations

import contextvars
import math
import time

__all__ = ["close_budget", "expired", "is_open", "open_budget", "remaining", "BUDGET_CAUSE"]

#: why a set-up step gave up when the budget ran out (its cause, e.g. a reference's)
BUDGET_CAUSE = "the run's time budget ([stop] max_seconds) ran out before it finished"

_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("svmsim_run_deadline", default=math.inf)


def open_budget(seconds: float | None) -> contextvars.Token:
    """Start the run's budget of `seconds` (None: no budget) now; `close_budget` takes the token back."""
    return _DEADLINE.set(math.inf if seconds is None else time.perf_counter() + float(seconds))


def close_budget(token: contextvars.Token) -> None:
    _DEADLINE.reset(token)


def is_open() -> bool:
    return math.isfinite(_DEADLINE.get())


def remaining() -> float:
    """Seconds left of the run's budget (inf when none is open; 0 or less once it has run out)."""
    return _DEADLINE.get() - time.perf_counter()


def expired() -> bool:
    return remaining() <= 0.0
