"""Schedulers: synchronous rounds (`sync`) and asynchronous gossip on a virtual clock (`gossip`: per-node seeded
clocks, per-edge latencies, faults, one event heap keyed by (time, priority, sequence) so that replays are exact)."""
from .gossip import (Clock, Distribution, GossipKernel, GossipProgram, GossipProgress, GossipScheduler,
                     GossipStopReason, LatencyModel)
from .sync import StopReason, SyncScheduler

__all__ = ["SyncScheduler", "StopReason", "GossipScheduler", "GossipProgram", "GossipKernel", "GossipProgress",
           "GossipStopReason", "Clock", "LatencyModel", "Distribution"]
