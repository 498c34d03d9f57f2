"""Schedulers: synchronous rounds (`sync`, and its compiled form `compiled_sync`) and asynchronous gossip on a
virtual clock (`gossip`, driving the one event loop of `event_host` / `event_kernels`: per-node seeded clocks,
per-edge latencies, faults, one event heap keyed by (time, priority, sequence) so that replays are exact).

The names below are imported from their module on first use: a synchronous run (``svmsim.schedule.sync``) does
not import the gossip scheduler and its compiled event loop, nor a gossip run the synchronous one."""
from __future__ import annotations

import importlib

__all__ = ["SyncScheduler", "StopReason", "GossipScheduler", "GossipProgress", "GossipStopReason"]

#: exported name -> the module of this package that defines it
_HOME = {"SyncScheduler": "sync", "StopReason": "sync", "GossipScheduler": "gossip", "GossipProgress": "gossip",
         "GossipStopReason": "gossip"}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
