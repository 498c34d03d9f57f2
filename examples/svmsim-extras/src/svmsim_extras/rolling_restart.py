"""A fault kind of one's own: a rolling restart, as an operator upgrades a cluster node after node.

Starting at `start`, the nodes go down one after another, each for `downtime`, the next one `interval` after the
previous one went down (in a random order drawn from the run's fault seed, or in id order). A scenario uses it as

    [faults.rolling_restart]
    start = 5.0
    interval = 2.0
    downtime = 1.0
"""
from svmsim.api import FaultEffects, FaultKind, Outage, ParamSpec, register_fault


def rolling_restart(n_nodes, rng, start, interval, downtime, shuffle, keep_state):
    order = rng.permutation(n_nodes) if shuffle else range(n_nodes)
    return FaultEffects(outages=[Outage((int(node),), start + i * interval, start + i * interval + downtime,
                                        keep_state)
                                 for i, node in enumerate(order)])


register_fault(FaultKind(
    "rolling_restart", rolling_restart,
    "the nodes go down one after another for `downtime` each, `interval` apart, from `start`",
    {"start": ParamSpec(float, 0.0, "when the first node goes down", "a number >= 0", valid=lambda v: v >= 0),
     "interval": ParamSpec(float, 1.0, "time between two nodes going down", "a number > 0", valid=lambda v: v > 0),
     "downtime": ParamSpec(float, 1.0, "how long each node stays down", "a number > 0", valid=lambda v: v > 0),
     "shuffle": ParamSpec(bool, True, "restart in a random order (false: in id order)"),
     "keep_state": ParamSpec(bool, True, "a node comes back with its state (false: restarted; gossip only)")},
    gossip_only=lambda p: not p["keep_state"]))
