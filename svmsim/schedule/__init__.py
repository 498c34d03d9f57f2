"""Schedulers: synchronous rounds (`sync`, and its compiled form `compiled_sync`) and asynchronous gossip on a
virtual clock (`gossip`, driving the one event loop of `event_host` / `event_kernels`: per-node seeded clocks,
per-edge latencies, faults, one event heap keyed by (time, priority, sequence) so that replays are exact)."""
from .gossip import GossipProgress, GossipScheduler, GossipStopReason
from .sync import StopReason, SyncScheduler

__all__ = ["SyncScheduler", "StopReason", "GossipScheduler", "GossipProgress", "GossipStopReason"]
