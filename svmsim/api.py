"""The public API for writing algorithms of one's own: everything an algorithm author needs, in one module.

What is exported here is stable: a name is not removed or changed incompatibly without a release that says so in
CHANGELOG.md, and the built-in families use the same pieces. Nothing an author needs starts with ``_``.

An algorithm is a package of its own (nothing in svmsim changes):

* its **node programs**: `NodeProgram` subclasses for synchronous rounds (``init``, ``step``, ``observe``; a
  compiled `SyncKernel` optionally), or `GossipProgram` subclasses for asynchronous gossip (``init``, ``wake``,
  ``receive``, ``observe``). Programs read an `Inbox` and write an `Outbox` of `MessageBatch`es; they never touch a
  transport. Progress goes to the scheduler as `Outbox.signals` (`SIGNALS`);
* a **build** function ``build(params, problem) -> Deployment``: the roles (`RoleSpec`: program, node ids, per-node
  data), the topology, the evaluation, the declared count of scalars (held against the meter), the model;
* its **registration**: ``register(AlgorithmInfo(name=..., Params=..., build=..., scheduler=..., conformance=
  Conformance(params=...)))``, in a module that a scenario names (``[algorithm] module = "mypkg.algo"``) or that an
  installed distribution lists in the entry-point group ``svmsim.algorithms``. ``build=deferred("mypkg.run:build")``
  names the build without importing it, so that listing the algorithm and validating its scenarios stay light (the
  built-in families do so).

Then ``svmsim run``, ``svmsim sweep``, ``svmsim list algorithms NAME`` and ``svmsim check NAME`` work on it, on every
engine. Topologies, partition schemes, fault kinds, engines and message codecs of one's own register the same way
(`register_topology`, `register_partition`, `register_fault`, `register_engine`, `register_codec`; entry-point groups
``svmsim.topologies``, ``svmsim.partitions``, ``svmsim.faults``, ``svmsim.engines``, ``svmsim.codecs``). The guide "Write your own algorithm" (docs/howto/write-an-algorithm.md) walks through two examples, and
``examples/svmsim-extras`` is an installable package holding them.
"""
from __future__ import annotations

from .algorithms.stall import CertificateStall, ObjectiveSettle
from .algorithms.registry import (ANY_TOPOLOGY, AlgorithmInfo, Conformance, algorithm_names, get_algorithm,
                                  load_module, register)
from .comm.codecs import Codec, register_codec
from .comm.message import Inbox, MessageBatch, Outbox, frozen_ids
from .core import deadline
from .core.jit import REPRODUCIBLE_FASTMATH, inner
from .core.plugins import deferred
from .data import Dataset, partition
from .deployment import (Deployment, Problem, ServerClientLayout, SingleMachineRun, observations_by_role,
                         server_client_layout)
from .errors import (DataError, InfeasibleParameterError, PluginError, ProtocolError, ScenarioError, SvmsimError,
                     TopologyError)
from .program import (KERNEL_DONE, KERNEL_ERROR, KERNEL_PAUSE, KERNEL_WAKE, GossipKernel, GossipProgram, NodeProgram,
                      NodeRows, Ragged, RoleSpec, SyncKernel, frozen_view)
from .core.fault_kinds import FaultEffects, FaultKind, Outage, register_fault
from .engine.base import Engine
from .engine.inproc import InProcessEngine
from .engine.kinds import EngineKind, register_engine
from .data import register_partition
from .topology import ParamSpec, TopologySpec, build_topology, register_topology

__all__ = [
    # node programs and their compiled forms
    "NodeProgram", "GossipProgram", "RoleSpec", "NodeRows", "Ragged", "SyncKernel", "GossipKernel", "frozen_view",
    "KERNEL_WAKE", "KERNEL_DONE", "KERNEL_PAUSE", "KERNEL_ERROR", "SIGNALS",
    # numba's njit for helpers that only compiled code calls (compiles several times faster), and the fastmath flags a
    # kernel may take and still give the same bits compiled or loaded from numba's cache
    "inner", "REPRODUCIBLE_FASTMATH",
    # messages
    "MessageBatch", "Outbox", "Inbox", "frozen_ids",
    # deployments
    "Problem", "Deployment", "SingleMachineRun", "ServerClientLayout", "server_client_layout", "observations_by_role",
    "build_topology", "partition", "Dataset",
    # registration
    "AlgorithmInfo", "Conformance", "register", "get_algorithm", "algorithm_names", "load_module", "ANY_TOPOLOGY",
    "deferred",
    # topologies and partition schemes of one's own (entry-point groups svmsim.topologies, svmsim.partitions)
    "TopologySpec", "ParamSpec", "register_topology", "register_partition",
    # fault kinds of one's own (entry-point group svmsim.faults)
    "FaultKind", "FaultEffects", "Outage", "register_fault",
    # engines of one's own (entry-point group svmsim.engines)
    "Engine", "InProcessEngine", "EngineKind", "register_engine",
    # what an engine's `gossip` returns, and what a gossip run reports
    "GossipRun", "GossipTiming", "GossipOutcome", "GossipProgress", "GossipStopReason",
    # message codecs of one's own (entry-point group svmsim.codecs)
    "Codec", "register_codec",
    # stopping rules an evaluation can use: a row's "diagnosis" (a string) stops the run with it as the reason;
    # `deadline.expired()` says when a long set-up step has spent the run's [stop] max_seconds
    "ObjectiveSettle", "CertificateStall", "deadline",
    # running and checking
    "run", "load_scenario", "RunResult", "conformance",
    # errors
    "SvmsimError", "ScenarioError", "PluginError", "DataError", "TopologyError", "InfeasibleParameterError",
    "ProtocolError",
]

#: the signals a program's step may set in ``Outbox.signals`` (never metered; they model the simulation's observer)
SIGNALS = {
    "iteration": "int: iteration t is complete once this round's messages are delivered (synchronous rounds: "
                 "evaluation points, iteration budgets and stop rules count these; a run whose programs never send "
                 "it has no evaluation point before its end)",
    "wake": "True: step this group next round even with an empty inbox (synchronous rounds)",
    "done": "True: the algorithm has finished (synchronous rounds: the run stops; gossip: this group's nodes have "
            "all finished, and the run stops when every group has said so)",
    "counts": "{quantity: amounts}: work of a node quantity (e.g. 'kernel_evaluations') the group's members did in "
              "this step, one amount per member in member order (gossip: one amount, for the event's node; a "
              "compiled gossip kernel keeps running totals in GossipKernel.counts): metered per node and round",
    "work": "array: operations each member did in this step, for the modelled cluster time ([network])",
}


def __getattr__(name):
    # the runner (Ray, plotting) and the conformance suite load on first use
    if name in ("run", "RunResult"):
        from . import runner

        return getattr(runner, name)
    if name == "load_scenario":
        from .config import load_scenario

        return load_scenario
    if name == "conformance":
        from . import conformance

        return conformance
    if name in ("GossipRun", "GossipTiming", "GossipOutcome", "GossipProgress", "GossipStopReason"):
        from .schedule import gossip

        return getattr(gossip, name)
    raise AttributeError(f"module 'svmsim.api' has no attribute {name!r}")
