"""The Ray engine: groups of nodes live in Ray actors (*hosts*).

Each role played by several nodes (the clients, the peers) is split into `actors` groups of contiguous nodes;
a role played by one node (the server) is one group. Where a group lives is its `Group.host`: groups that
share a host name share an actor. With ``colocate`` (the default) every single-node role's group joins the
host of the first group of the largest role, so k clients and their server run on exactly `actors` actors
("client-0..9+server", "client-10..19"); otherwise such a group gets an actor of its own ("server"). Hosts are
named after the groups they carry, joined with "+", so the Ray dashboard shows the roles, inside a namespace
unique to the engine. Co-location decides which actor steps a group, never how nodes are grouped, so ledgers
and iterates are those of the in-process engine either way.

A synchronous round is one Ray call per host that has mail, carrying all of its groups' inboxes, all
submitted before a single `ray.get`, so the hosts of one round run in parallel; inside a host, groups are
stepped in gid order. With ``compiled=True`` the hosts are driven by a Ray compiled graph built once at
deploy: a round executes the graph once, hosts without mail receive ``None`` and return at once. A compiled
graph keeps its actors polling while it is alive (about one core on a small machine), so `close()` always
tears it down; use the engine as a context manager or call `close()` in a ``finally`` block.

A round's inboxes and outboxes travel as one bytes object per host (see `encode_inboxes`), not as Python
objects for Ray to serialise array by array. Routing and metering stay in the scheduler, so this engine
yields the same ledger as the in-process one.

Ray's worker processes must be able to import svmsim and the modules that define the node programs (programs
defined in the driver's ``__main__`` travel by value).
"""
from __future__ import annotations

import logging
import pickle
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import ray
from ray.exceptions import ActorUnschedulableError, RayActorError, RayChannelError, RayTaskError

from ..comm.message import Inbox, MessageBatch, Outbox
from ..errors import EngineFailure, ScenarioError
from .kinds import GOSSIP_MODES
from ..program import Group, NodeProgram, RoleSpec
from .base import Engine, split_roles
from .ray_actors import (HostJournal, colocate_groups, ensure_ray, host_options, lost_hosts, new_namespace,
                         placement, raise_original, release_actors, this_node)

__all__ = ["RayEngine", "NodeHost", "colocate_groups", "placement"]

_DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2
_CGRAPH_LOGGER = "ray.dag.compiled_dag_node"
_WIRES = ("bytes", "objects")
#: the signal a timed host (`NodeHost.timed`) adds to each outbox: its step's wall seconds (taken off by the driver)
STEP_SECONDS = "step_seconds"


# -- the wire format of a round ----------------------------------------------------------------------------
# Ray serialises an object holding numpy arrays array by array, which costs more per round than the round's
# messages are worth. A round's inbox and outbox therefore travel as one bytes object each: every batch as
# (tag, src, dst, payload) with each array as (dtype, shape, raw buffer), pickled in one pass. Decoding
# rebuilds the arrays on the received buffers without copying them again; they arrive writable.
_PICKLE = pickle.HIGHEST_PROTOCOL


def _dump(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=_PICKLE)
    except (pickle.PicklingError, AttributeError, TypeError):  # e.g. a signal value defined in __main__
        return ray.cloudpickle.dumps(obj, protocol=_PICKLE)


def _wire_array(a):
    a = np.asarray(a)
    if a.dtype.hasobject:
        return a  # pickled as an object
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:
        a = a.copy()
    # a writable buffer is pickled in band as a bytearray of its own, so every array arrives writable and
    # owns its memory: a small array kept by the receiver (an index array, say) never pins a large buffer
    return (a.dtype.str, a.shape, pickle.PickleBuffer(a))


def _array(w) -> np.ndarray:
    if isinstance(w, np.ndarray):
        return w
    dtype, shape, buf = w
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _wire_batches(items) -> list:
    return [(key, b.tag, _wire_array(b.src), _wire_array(b.dst), _wire_array(b.payload)) for key, b in items]


def _batch(w) -> MessageBatch:
    return MessageBatch(w[1], _array(w[2]), _array(w[3]), _array(w[4]))


def _inbox(batches) -> Inbox:
    inbox = Inbox()
    for w in batches:
        inbox[w[0]] = _batch(w)
    return inbox


def _wire_outbox(out: Outbox) -> tuple:
    return _wire_batches((None, b) for b in out.batches), out.signals


def _outbox(w) -> Outbox:
    return Outbox([_batch(b) for b in w[0]], w[1])


def encode_inbox(round_: int, inbox: Inbox) -> bytes:
    """One group's inbox for one round as one bytes object (see `encode_inboxes` for several groups)."""
    return _dump((round_, _wire_batches(inbox.items())))


def decode_inbox(data: bytes) -> tuple[int, Inbox]:
    round_, batches = pickle.loads(data)
    return round_, _inbox(batches)


def encode_outbox(out: Outbox) -> bytes:
    return _dump(_wire_outbox(out))


def decode_outbox(data: bytes) -> Outbox:
    return _outbox(pickle.loads(data))


def encode_inboxes(round_: int, inboxes: dict[int, Inbox]) -> bytes:
    """The inboxes of the groups one host steps in one round, ``{gid: inbox}``, as one bytes object."""
    return _dump((round_, [(gid, _wire_batches(inbox.items())) for gid, inbox in inboxes.items()]))


def decode_inboxes(data: bytes) -> tuple[int, dict[int, Inbox]]:
    round_, groups = pickle.loads(data)
    return round_, {gid: _inbox(batches) for gid, batches in groups}


def encode_outboxes(outboxes: dict[int, Outbox]) -> bytes:
    """The outboxes of the groups one host stepped in one round, ``{gid: outbox}``, as one bytes object."""
    return _dump([(gid, *_wire_outbox(out)) for gid, out in outboxes.items()])


def decode_outboxes(data: bytes) -> dict[int, Outbox]:
    return {gid: _outbox(w) for gid, *w in pickle.loads(data)}


#: the compiled graph's input that asks every host for a checkpoint (no pickle starts so: rounds start b"\x80")
GRAPH_CHECKPOINT = b"svmsim:checkpoint"


@ray.remote(num_cpus=0)
class NodeHost:
    """One or more groups of logical nodes, each with its program and state (a plain, ordered Ray actor).

    Groups are stepped in gid order within one call; a call carries the inboxes of the groups that run.
    """

    def __init__(self, name: str):
        self.name = name
        self.programs: dict[int, NodeProgram] = {}
        self.states: dict[int, Any] = {}
        self.timed = False          # time each group's step (``compute = "measured"``): its outbox carries it

    def _failed(self, err: BaseException, gid: int) -> None:
        if hasattr(err, "add_note"):  # Python >= 3.11; the note travels back with the exception
            where = f"Ray host {self.name!r}" + (f", group {gid}" if len(self.programs) > 1 else "")
            err.add_note(f"(raised on {where})")

    def deploy(self, groups: list[tuple], seed: int, timed: bool = False) -> str:
        """Initialise this host's groups, given as ``(gid, program, node_ids, node_data)``; returns the id of the
        Ray node it runs on. `timed`: each step's wall seconds go back in its outbox's signals (`STEP_SECONDS`)."""
        self.timed = bool(timed)
        for gid, program, node_ids, node_data in sorted(groups, key=lambda t: t[0]):
            self.programs[gid] = program
            try:
                self.states[gid] = program.init(node_ids, node_data, seed)
            except Exception as err:
                self._failed(err, gid)
                raise
        return this_node()

    def step(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]:
        """Step the groups that have mail, ``{gid: inbox}``, in gid order; returns ``{gid: outbox}``."""
        programs, states = self.programs, self.states
        out = {}
        for gid in (sorted(inboxes) if len(inboxes) > 1 else inboxes):
            try:
                start = time.perf_counter()
                states[gid], out[gid] = programs[gid].step(states[gid], inboxes[gid], round_)
                if self.timed:
                    out[gid].signals = {**(out[gid].signals or {}), STEP_SECONDS: time.perf_counter() - start}
            except Exception as err:
                self._failed(err, gid)
                raise
        return out

    def step_packed(self, work: bytes) -> bytes:
        """`step` with the round's inboxes and outboxes in svmsim's wire format (see `encode_inboxes`)."""
        round_, inboxes = decode_inboxes(work)
        return encode_outboxes(self.step(round_, inboxes))

    def step_graph(self, work: bytes | None) -> bytes | None:
        """Compiled-graph entry: `step_packed` for a host with mail, ``None`` at once for an idle one, and
        `checkpoint` for `GRAPH_CHECKPOINT` (an actor call beside a live graph waits for the graph's polling thread
        to let go of the interpreter lock, several ms)."""
        if work is None:
            return None
        if work == GRAPH_CHECKPOINT:
            return self.checkpoint()
        return self.step_packed(work)

    def observe(self, gids: list[int] | None = None) -> dict[int, Any]:
        """``{gid: observation}`` of the given groups (default: all of this host's groups)."""
        out = {}
        for gid in (sorted(self.programs) if gids is None else gids):
            try:
                out[gid] = self.programs[gid].observe(self.states[gid])
            except Exception as err:
                self._failed(err, gid)
                raise
        return out

    def checkpoint(self) -> bytes:
        """Every group's state, pickled (the programs and their data are the deployed ones, not copied)."""
        try:
            return _dump(self.states)
        except Exception as err:  # noqa: BLE001 - name the group whose state does not pickle
            for gid, state in self.states.items():
                try:
                    _dump(state)
                except Exception:  # noqa: BLE001
                    raise ScenarioError(
                        f"the state of group {gid} on Ray host {self.name!r} ({type(self.programs[gid]).__name__}) "
                        f"cannot be pickled for a checkpoint ({type(err).__name__}: {err}); allowed: a state that "
                        "pickles, or [engine] recover = false (no checkpoints; a lost host then ends the run)"
                    ) from None
            raise

    def restore(self, blob: bytes) -> bool:
        """Take up a checkpoint of this host (taken by an actor deployed with the same groups)."""
        self.states = pickle.loads(blob)
        return True

    def ping(self) -> bool:
        return True


class _LostActorChatter(logging.Filter):
    """Drops what Ray's compiled graph logs when it tears itself down after an actor died (the engine reports the
    lost host itself, or replaces it) and its info-level teardown lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return record.levelno >= logging.WARNING and not isinstance(exc, RayActorError)


@contextmanager
def _quiet(logger_name: str, level: int = logging.WARNING):
    """Raise one logger's level for the duration of a block (compiled-graph setup and teardown chatter)."""
    logger = logging.getLogger(logger_name)
    old = logger.level
    logger.setLevel(max(level, old))
    try:
        yield
    finally:
        logger.setLevel(old)


class RayEngine(Engine):
    """Runs groups of nodes in Ray actors.

    Parameters
    ----------
    compiled: drive the hosts with a Ray compiled graph (engine name "ray-cgraph") instead of one
        ``.remote()`` call per host per round ("ray").
    address: address of a running Ray cluster to join; None starts a local Ray (unless Ray is already
        initialised in this process, in which case that instance is used).
    actors: number of groups (and host actors) for each role played by more than one node.
    colocate: put the group of every role played by a single node (the server) in the host actor of the first
        group of the largest role, so that the whole deployment runs on `actors` actors ("client-0..9+server",
        "client-10..19"); False gives such a role an actor of its own ("server", "client-0..9", ...). Default
        True for both modes, from benchmarks/bench_ray_round.py (k=20 clients, 2 cores, medians of 15
        interleaved repetitions): a compiled graph over 2 actors runs a round in 0.30 ms against 0.53 ms over 3
        (every actor of a live graph polls its input channel, about one core each, so a third one competes
        with the driver; faster in 14 of 15 repetitions), and plain calls are no slower co-located (1.41 vs
        1.44 ms a round, client rounds 1.56 vs 1.65 ms, faster in 12 of 15 repetitions).
        Saddle-DSVC's server and clients take turns (never stepped in the same round), so co-location
        serialises no work; choose False for a program whose server step should overlap client steps.
    init_options: extra keyword arguments for ``ray.init`` (override this engine's local defaults).
    namespace: Ray namespace of the host actors; default ``svmsim-<8 hex digits>``, unique per engine.
    round_timeout: seconds to wait for one round before failing; None waits as long as the round takes.
    wire: how a round's inboxes and outboxes travel: "bytes" (default) encodes each host's into one bytes
        object (raw array buffers, one pickle pass), which Ray moves much faster than objects holding several
        numpy arrays; "objects" hands the Inbox and Outbox objects to Ray's own serialiser (plain actors only: a
        compiled graph would pass arrays as views of its channel buffers, which must not outlive a round).
    gossip: how gossip hosts keep time (`engine.ray_gossip`): "free" (each host runs on its own clock, kept within
        a skew of the others; fast, but runs differ) or "deterministic" (time windows no longer than the smallest
        latency: the in-process run bit for bit).
    recover: replace a host actor that dies (its process killed, `ray.kill`, a lost machine) and go on as if it had
        not: synchronous rounds and deterministic gossip (`engine.ray_windows`). The driver keeps a checkpoint of
        every host (its groups' states, pickled) every `checkpoint_every` rounds (windows, for gossip; later while
        the last one took more than `ray_actors.MAX_CHECKPOINT_SHARE` of the time since) and every request sent
        to a host since. A new actor is deployed with the lost one's groups, takes up the checkpoint
        and is handed the rounds since again; so are the other hosts (a compiled graph is built anew), so the run
        ends with the ledger and iterates of an undisturbed one. False: a lost host ends the run with one message
        naming it and its logical nodes (`errors.EngineFailure`). A host lost again while the hosts are rebuilt
        ends the run the same way.
    """

    def __init__(self, compiled: bool = False, address: str | None = None, actors: int = 2,
                 colocate: bool = True, init_options: dict | None = None, namespace: str | None = None,
                 round_timeout: float | None = None, wire: str = "bytes", gossip: str = "free",
                 checkpoint_every: int | None = 100, recover: bool = True):
        if int(actors) < 1:
            raise ScenarioError(f"engine actors = {actors!r} is not a number of Ray actors; allowed: an integer >= 1")
        if wire not in _WIRES:
            raise ScenarioError(f"engine wire = {wire!r} is not a wire format; allowed: {', '.join(_WIRES)}")
        if compiled and wire != "bytes":
            # a compiled graph hands numpy arrays over as views of its channel buffers; a node program or the
            # scheduler keeping one past the round stops the graph from writing that channel again (it hangs)
            raise ScenarioError(f"engine wire = {wire!r} cannot drive a compiled graph; allowed with "
                                "compiled=True: 'bytes'")
        if not isinstance(colocate, (bool, np.bool_)):
            raise ScenarioError(f"engine colocate = {colocate!r} is not a switch; allowed: true, false")
        self.packed = wire == "bytes"
        self.compiled = bool(compiled)
        self.colocate = bool(colocate)
        self.name = "ray-cgraph" if self.compiled else "ray"
        self.address = address
        if gossip not in GOSSIP_MODES:
            raise ScenarioError(f"engine gossip = {gossip!r} is not a mode of gossip on Ray; allowed: "
                                f"{', '.join(GOSSIP_MODES)}")
        self.gossip_mode = gossip
        if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or int(checkpoint_every) < 1):
            raise ScenarioError(f"engine checkpoint_every = {checkpoint_every!r} is out of range; allowed: an "
                                "integer >= 1 (rounds, or windows of deterministic gossip), or None")
        self.checkpoint_every = None if checkpoint_every is None else int(checkpoint_every)
        self.recover = bool(recover)
        self._journal: HostJournal | None = None   # checkpoints and logged rounds (with `recover`)
        self._deployed: list[list[tuple]] = []     # per host: its groups as deployed, (gid, program, ids, data)
        self._seed = 0
        self._round = -1                           # the last round stepped
        self._chatter = _LostActorChatter()        # installed on Ray's compiled-graph logger while a graph lives
        self.actors = int(actors)
        self.init_options = dict(init_options or {})
        self._own_namespace = namespace is None
        self.namespace = namespace or new_namespace()
        self.round_timeout = round_timeout
        self.started_ray = False
        self.groups: list[Group] = []
        self.host_names: dict[int, str] = {}  # gid -> name of the actor that carries the group
        self.hosts: dict[str, list[int]] = {}  # actor name -> gids it carries, in the graph's input order
        self._hosts: list[Any] = []  # actor handles, in the order of `hosts`
        self.host_nodes: dict[str, str] = {}   # host actor name -> the id of the Ray node Ray placed it on
        self._host_of: dict[int, int] = {}  # gid -> position of its actor in `_hosts`
        self._step_calls: list[Any] = []  # bound actor method that steps a round, per actor
        self._graph = None
        self._closed = False
        self.timed = False                      # hosts time each group's step (`time_steps`)
        self.step_seconds: dict[int, float] = {}

    # -- placement ----------------------------------------------------------------------------------------
    def plan(self, roles: list[RoleSpec]) -> list[Group]:
        """One group per role slice (`split_roles`); with ``colocate``, `Group.host` names the shared actor."""
        groups = split_roles(roles, {spec.role: self.actors for spec in roles if len(spec.node_ids) > 1})
        return colocate_groups(groups) if self.colocate else groups

    def _ensure_ray(self) -> None:
        self.started_ray = ensure_ray(self.address, self.init_options) or self.started_ray

    # -- engine interface ---------------------------------------------------------------------------------
    def deploy(self, groups: list[Group], seed: int) -> None:
        """Start one actor per distinct `Group.host` (groups that share a host name share an actor).

        With ``colocate`` the groups are first co-located as `plan` does (a no-op for groups it planned).
        """
        if self._hosts:
            raise RuntimeError("this RayEngine is already deployed; close it first, or build a new engine")
        if self._closed and self._own_namespace:  # deployed before: the old names may not be released yet
            self.namespace = new_namespace()
        self._closed = False
        self._ensure_ray()
        self.groups = list(groups)
        if self.colocate:
            colocate_groups(self.groups)
        self.hosts = placement(self.groups)
        self.host_names = {gid: name for name, gids in self.hosts.items() for gid in gids}
        self._host_of = {gid: j for j, gids in enumerate(self.hosts.values()) for gid in gids}
        by_gid = {g.gid: g for g in self.groups}
        self._deployed = [[(gid, by_gid[gid].program, by_gid[gid].node_ids, by_gid[gid].node_data) for gid in gids]
                          for gids in self.hosts.values()]
        self._seed = seed
        self._journal = HostJournal(len(self.hosts), self.checkpoint_every) if self.recover else None
        try:
            for j, name in enumerate(self.hosts):
                self._hosts.append(self._new_host(j, name))
                self._step_calls.append(self._step_call(self._hosts[j]))
            where = self._get([handle.deploy.remote(self._deployed[j], seed, self.timed)
                               for j, handle in enumerate(self._hosts)])
            self.host_nodes = dict(zip(self.hosts, where))
            if self.compiled:
                self._compile()
        except BaseException:
            self.close()
            raise

    def _new_host(self, j: int, actor_name: str, replacement: bool = False):
        """A new (not yet deployed) actor for host `j`, named `actor_name`, placed as `host_scheduling` says (a
        replacement for a lost host prefers, not requires, that node)."""
        options = host_options(len(self.hosts), soft=replacement)[j]
        return NodeHost.options(name=actor_name, namespace=self.namespace, **options).remote(list(self.hosts)[j])

    def _step_call(self, handle):
        return handle.step_packed if self.packed else handle.step

    def _compile(self) -> None:
        from ray.dag import InputNode, MultiOutputNode

        with InputNode() as inp:
            dag = MultiOutputNode([h.step_graph.bind(inp[j]) for j, h in enumerate(self._hosts)])
        with _quiet(_CGRAPH_LOGGER):
            self._graph = dag.experimental_compile()
        logging.getLogger(_CGRAPH_LOGGER).addFilter(self._chatter)

    def _teardown_graph(self) -> None:
        graph, self._graph = self._graph, None
        if graph is not None:
            try:
                with _quiet(_CGRAPH_LOGGER):
                    graph.teardown()
            except Exception:  # noqa: BLE001 - a graph Ray tore down itself (a lost actor) is gone already
                pass
            logging.getLogger(_CGRAPH_LOGGER).removeFilter(self._chatter)

    def _by_host(self, inboxes: dict[int, Inbox]) -> dict[int, dict[int, Inbox]]:
        """The round's inboxes split by host: ``{host position: {gid: inbox}}``."""
        host_of = self._host_of
        work: dict[int, dict[int, Inbox]] = {}
        for gid, inbox in inboxes.items():
            j = host_of[gid]
            mine = work.get(j)
            if mine is None:
                work[j] = {gid: inbox}
            else:
                mine[gid] = inbox
        return work

    def step(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]:
        # one request per host with mail: its groups' inboxes (one bytes object, or the round and the Inbox objects)
        if self.packed:
            work = {j: encode_inboxes(round_, mine) for j, mine in self._by_host(inboxes).items()}
        else:
            work = {j: (round_, mine) for j, mine in self._by_host(inboxes).items()}
        self._round = round_
        journal = self._journal
        due = journal.record(work) if journal is not None else False
        try:
            out = self._step_graph(work) if self._graph is not None else self._step_actors(work)
        except EngineFailure as lost:
            if journal is None:
                raise
            out = self._recover(lost, work)
        if due:
            self._checkpoint()
        if self.timed:                      # each group's step, timed on its host (`time_steps`)
            self.step_seconds = {}
            for gid, outbox in out.items():
                signals = dict(outbox.signals)
                self.step_seconds[gid] = signals.pop(STEP_SECONDS)
                outbox.signals = signals or None
        return out

    def time_steps(self) -> bool:
        """Time each group's step where it runs (its host actor), for ``compute = "measured"``; before `deploy`."""
        self.timed = True
        return True

    def _outboxes(self, results) -> dict[int, Outbox]:
        """``{gid: outbox}`` from the hosts' results of one round."""
        out: dict[int, Outbox] = {}
        for res in results:
            out.update(decode_outboxes(res) if self.packed else res)
        return out

    def _step_actors(self, work: dict[int, Any]) -> dict[int, Outbox]:
        calls = self._step_calls
        if self.packed:
            return self._outboxes(self._get([calls[j].remote(req) for j, req in work.items()]))
        return self._outboxes(self._get([calls[j].remote(*req) for j, req in work.items()]))

    def _step_graph(self, work: dict[int, bytes]) -> dict[int, Outbox]:
        """One execution of the compiled graph: every host runs, those without mail return None at once."""
        args: list = [None] * len(self._hosts)
        for j, req in work.items():
            args[j] = req
        outs = self._run_graph(args)
        return self._outboxes(outs[j] for j in work)

    def _run_graph(self, args: list) -> list:
        """One execution of the compiled graph with one input per host; their results."""
        timeout = -1 if self.round_timeout is None else self.round_timeout  # -1: no limit for a compiled graph
        try:
            return ray.get(self._graph.execute(*args), timeout=timeout)
        except RayTaskError as err:
            raise_original(err)
        except (RayActorError, RayChannelError) as err:    # (a graph torn down after an actor died: its channels)
            raise lost_hosts(self.hosts, self._hosts, self.groups, err) from None

    # -- checkpoints and the recovery of lost hosts -------------------------------------------------------------
    def _checkpoint(self) -> None:
        def take():
            if self._graph is not None:
                return self._run_graph([GRAPH_CHECKPOINT] * len(self._hosts))
            return self._get([h.checkpoint.remote() for h in self._hosts])

        try:
            self._journal.take(take)
        except EngineFailure as lost:      # lost while checkpointing: rebuild from the last one, then take it
            self._recover(lost, {})
            self._journal.take(take)

    def _recover(self, lost: EngineFailure, work: dict[int, Any]) -> dict[int, Outbox]:
        """Replace the lost hosts by new actors deployed with their groups; bring every host back to its last
        checkpoint and hand it the rounds since again (the last one is `work`, the round that failed); returns
        that round's outboxes. A host that also fails now ends the run (`EngineFailure`)."""
        t0 = time.perf_counter()
        journal = self._journal
        self._teardown_graph()
        dead = set(lost.hosts)
        last: dict[int, Any] = {}
        pending: list = []
        placed: dict[str, int] = {}        # host name -> position of its deploy call in `pending`
        for j, name in enumerate(self.hosts):
            handle = self._hosts[j]
            if name in dead:
                try:
                    ray.kill(handle, no_restart=True)   # gone already, or (when none was found dead) replaced too
                except Exception:  # noqa: BLE001
                    pass
                attempt = 1 + sum(1 for r in journal.recovered if name in r["hosts"])
                handle = self._hosts[j] = self._new_host(j, f"{name}~{attempt}", replacement=True)
                self._step_calls[j] = self._step_call(handle)
            if name in dead or journal.checkpoints[j] is None:   # (again, for a host without checkpoint yet)
                placed[name] = len(pending)
                pending.append(handle.deploy.remote(self._deployed[j], self._seed, self.timed))
            call = self._step_calls[j]
            # actor calls run in the order sent: submit the whole rebuild, then wait once
            restore = lambda blob, h=handle: pending.append(h.restore.remote(blob))  # noqa: E731
            replay = (lambda req, c=call: c.remote(req)) if self.packed else (lambda req, c=call: c.remote(*req))
            last[j] = journal.rebuild(j, restore, replay)
        refs = [ref for ref in last.values() if ref is not None]
        done = self._get(pending + refs, timeout=None, rebuilding=True)    # (no round's timeout: many rounds)
        results = dict(zip([j for j, ref in last.items() if ref is not None], done[len(pending):]))
        for name in dead:
            self.host_nodes[name] = done[placed[name]]          # the Ray node the new actor runs on
        if self.compiled:
            try:
                self._compile()
            except Exception as err:  # noqa: BLE001 - a host lost while the graph is built
                raise lost_hosts(self.hosts, self._hosts, self.groups, err, rebuilding=True) from err
        journal.recovered.append({"hosts": sorted(dead), "at_round": self._round, "replayed_rounds": journal.since,
                                  "from_checkpoint": journal.checkpoints[0] is not None,
                                  "seconds": time.perf_counter() - t0})
        return self._outboxes(results[j] for j in work)

    def recovery(self) -> dict | None:
        """What checkpoints cost and which hosts were replaced: `HostJournal.stats` (None without `recover`)."""
        return None if self._journal is None else self._journal.stats()

    def observe(self, gids: list[int] | None = None) -> dict[int, Any]:
        try:
            return self._observe(gids)
        except EngineFailure as lost:
            if self._journal is None:
                raise
            self._recover(lost, {})
            return self._observe(gids)

    def _observe(self, gids: list[int] | None) -> dict[int, Any]:
        gids = [g.gid for g in self.groups] if gids is None else list(gids)
        asked: dict[int, list[int]] = {}
        for gid in gids:
            asked.setdefault(self._host_of[gid], []).append(gid)
        got: dict[int, Any] = {}
        for part in self._get([self._hosts[j].observe.remote(mine) for j, mine in asked.items()]):
            got.update(part)
        return {gid: got[gid] for gid in gids}

    def gossip(self, roles, seed, topology, *, node_names=None, clock=None, latency=None, faults=None,
               round_time=None, compiled=None, compression=None):
        """Gossip hosts in `actors` Ray actors that send to each other directly (`engine.ray_gossip`), with this
        engine's cluster settings; the compiled graph does not run gossip."""
        from .ray_gossip import RayGossipRun

        if self.compiled:
            raise ScenarioError("the compiled graph (engine ray-cgraph) runs synchronous rounds only; gossip runs "
                                "on plain actors: allowed: engine.name = \"ray\"")
        self._ensure_ray()      # this engine's Ray: it outlives the gossip run until `close` (live metrics read it)
        run = RayGossipRun(actors=self.actors, address=self.address, init_options=self.init_options,
                           deterministic=self.gossip_mode == "deterministic",
                           checkpoint_every=self.checkpoint_every, recover=self.recover)
        try:
            run.deploy(run.plan(roles), seed, topology, clock=clock, latency=latency, faults=faults,
                       round_time=round_time, compiled=compiled, node_names=node_names, compression=compression)
        except BaseException:
            run.close()
            raise
        return run

    def ping(self) -> bool:
        """True when every host answers."""
        return all(self._get([h.ping.remote() for h in self._hosts]))

    def _get(self, refs: list, timeout: float | None | str = "round", rebuilding: bool = False) -> list:
        """`ray.get` over one call per host (within `round_timeout` unless `timeout` says otherwise); a node
        program's exception is re-raised as itself, a host actor that died (or cannot be placed) as an
        `EngineFailure` naming it and its logical nodes."""
        try:
            return ray.get(refs, timeout=self.round_timeout if timeout == "round" else timeout)
        except RayTaskError as err:
            raise_original(err)
        except (RayActorError, ActorUnschedulableError) as err:
            raise lost_hosts(self.hosts, self._hosts, self.groups, err, rebuilding=rebuilding) from None

    # -- lifetime -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Tear down the compiled graph, kill the host actors, and stop Ray if this engine started it.

        Safe to call more than once, and after a failure.
        """
        if self._closed:
            return
        self._closed = True
        self._teardown_graph()
        hosts, self._hosts = self._hosts, []
        self._step_calls = []
        release_actors(hosts, self.started_ray)
        self.started_ray = False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        return (f"RayEngine(name={self.name!r}, actors={self.actors}, colocate={self.colocate}, "
                f"namespace={self.namespace!r}, hosts={list(self.hosts)})")
