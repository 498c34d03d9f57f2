"""Schedulers: synchronous rounds (here) and asynchronous gossip on a virtual clock (a later module,
`schedule/gossip.py`, with an event heap keyed by (time, sequence) so that replays are exact)."""
from .sync import StopReason, SyncScheduler

__all__ = ["SyncScheduler", "StopReason"]
