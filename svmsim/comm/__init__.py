"""Communication: logical messages, the meter and its ledger, and the papers' bound formulas.

The meter and the ledger (numba) are imported on first use of their names, so that reading a declaration below
them (the names of the collective patterns, `comm.patterns`) imports no compiler."""
from __future__ import annotations

import importlib

from .message import Inbox, MessageBatch, Outbox, merge_batches

#: the meter's and the ledger's names -> their module (imported on first use)
_HOME = {"MESSAGE_QUANTITIES": "ledger", "Ledger": "ledger", "merge_ledgers": "ledger", "Meter": "meter"}

__all__ = ["Inbox", "MessageBatch", "Outbox", "merge_batches", "Ledger", "Meter", "merge_ledgers",
           "MESSAGE_QUANTITIES"]


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
