"""The Ray engine: every group of nodes lives in its own Ray actor (a *host*).

Each role played by several nodes (the clients, the peers) is split over `actors` host actors; a role played by
one node (the server) gets a host of its own. Hosts are named after the nodes they carry ("server",
"client-0..9") so the Ray dashboard shows the roles, inside a namespace unique to the engine.

A synchronous round is one Ray call per host that has mail, all submitted before a single `ray.get`, so the
hosts of one round run in parallel. With ``compiled=True`` the hosts are driven by a Ray compiled graph built
once at deploy: a round executes the graph once, hosts without mail receive ``None`` and return at once. A
compiled graph keeps its actors polling while it is alive (about one core on a small machine), so `close()`
always tears it down; use the engine as a context manager or call `close()` in a ``finally`` block.

A round's inboxes and outboxes travel as one bytes object per host (see `encode_inbox`), not as Python objects
for Ray to serialise array by array. Routing and metering stay in the scheduler, so this engine yields the
same ledger as the in-process one.

Ray's worker processes must be able to import svmsim and the modules that define the node programs (programs
defined in the driver's ``__main__`` travel by value).
"""
from __future__ import annotations

import logging
import os
import pickle
import uuid
from contextlib import contextmanager
from typing import Any

import numpy as np
import ray
from ray.exceptions import RaySystemError, RayTaskError

from ..comm.message import Inbox, MessageBatch, Outbox
from ..errors import ScenarioError
from ..program import Group, NodeProgram, RoleSpec
from .base import Engine, split_roles

__all__ = ["RayEngine", "NodeHost"]

_DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2
_CGRAPH_LOGGER = "ray.dag.compiled_dag_node"
_WIRES = ("bytes", "objects")


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


def encode_inbox(round_: int, inbox: Inbox) -> bytes:
    return _dump((round_, _wire_batches(inbox.items())))


def decode_inbox(data: bytes) -> tuple[int, Inbox]:
    round_, batches = pickle.loads(data)
    inbox = Inbox()
    for w in batches:
        inbox[w[0]] = _batch(w)
    return round_, inbox


def encode_outbox(out: Outbox) -> bytes:
    return _dump((_wire_batches((None, b) for b in out.batches), out.signals))


def decode_outbox(data: bytes) -> Outbox:
    batches, signals = pickle.loads(data)
    return Outbox([_batch(w) for w in batches], signals)


@ray.remote(num_cpus=0)
class NodeHost:
    """One group of logical nodes of one role: its program and its state (a plain, ordered Ray actor)."""

    def __init__(self, name: str):
        self.name = name
        self.program: NodeProgram | None = None
        self.state: Any = None

    def _failed(self, err: BaseException) -> None:
        if hasattr(err, "add_note"):  # Python >= 3.11; the note travels back with the exception
            err.add_note(f"(raised on Ray host {self.name!r})")

    def deploy(self, program: NodeProgram, node_ids, node_data: list, seed: int) -> bool:
        self.program = program
        try:
            self.state = program.init(node_ids, node_data, seed)
        except Exception as err:
            self._failed(err)
            raise
        return True

    def step(self, round_: int, inbox: Inbox) -> Outbox:
        try:
            self.state, out = self.program.step(self.state, inbox, round_)
        except Exception as err:
            self._failed(err)
            raise
        return out

    def step_packed(self, work: bytes) -> bytes:
        """`step` with the round's inbox and outbox in svmsim's wire format (see `encode_inbox`)."""
        round_, inbox = decode_inbox(work)
        return encode_outbox(self.step(round_, inbox))

    def step_graph(self, work: bytes | None) -> bytes | None:
        """Compiled-graph entry: `step_packed` for a host with mail, ``None`` at once for an idle one."""
        return None if work is None else self.step_packed(work)

    def observe(self) -> Any:
        try:
            return self.program.observe(self.state)
        except Exception as err:
            self._failed(err)
            raise

    def ping(self) -> bool:
        return True


def _new_namespace() -> str:
    return f"svmsim-{uuid.uuid4().hex[:8]}"


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


def _original_error(err: BaseException) -> BaseException:
    """The exception raised inside an actor (by a node program, or while unpickling its arguments) if Ray
    carried it over; else `err` itself."""
    cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
    if isinstance(cause, RaySystemError) and isinstance(getattr(cause, "client_exc", None), BaseException):
        cause = cause.client_exc
    return cause if isinstance(cause, BaseException) else err


def _raise_original(err: RayTaskError):
    """Re-raise what failed inside a host actor as itself (type, message, and the host's note naming it)."""
    original = _original_error(err)
    if original is err:
        raise err
    if isinstance(original, ModuleNotFoundError) and hasattr(original, "add_note"):
        original.add_note("Ray's workers cannot import a module that the node programs need: install it (e.g. "
                          "`pip install -e .`), put it on PYTHONPATH, or ship it by value with "
                          "ray.cloudpickle.register_pickle_by_value(module)")
    raise original from err


class RayEngine(Engine):
    """Runs groups of nodes in Ray actors.

    Parameters
    ----------
    compiled: drive the hosts with a Ray compiled graph (engine name "ray-cgraph") instead of one
        ``.remote()`` call per host per round ("ray").
    address: address of a running Ray cluster to join; None starts a local Ray (unless Ray is already
        initialised in this process, in which case that instance is used).
    actors: number of host actors for each role played by more than one node.
    init_options: extra keyword arguments for ``ray.init`` (override this engine's local defaults).
    namespace: Ray namespace of the host actors; default ``svmsim-<8 hex digits>``, unique per engine.
    round_timeout: seconds to wait for one round before failing; None waits as long as the round takes.
    wire: how a round's inboxes and outboxes travel: "bytes" (default) encodes each into one bytes object
        (raw array buffers, one pickle pass), which Ray moves much faster than objects holding several numpy
        arrays; "objects" hands the Inbox and Outbox objects to Ray's own serialiser (plain actors only: a
        compiled graph would pass arrays as views of its channel buffers, which must not outlive a round).
    """

    def __init__(self, compiled: bool = False, address: str | None = None, actors: int = 2,
                 init_options: dict | None = None, namespace: str | None = None,
                 round_timeout: float | None = None, wire: str = "bytes"):
        if int(actors) < 1:
            raise ScenarioError(f"engine actors = {actors!r} is not a number of Ray actors; allowed: an integer >= 1")
        if wire not in _WIRES:
            raise ScenarioError(f"engine wire = {wire!r} is not a wire format; allowed: {', '.join(_WIRES)}")
        if compiled and wire != "bytes":
            # a compiled graph hands numpy arrays over as views of its channel buffers; a node program or the
            # scheduler keeping one past the round stops the graph from writing that channel again (it hangs)
            raise ScenarioError(f"engine wire = {wire!r} cannot drive a compiled graph; allowed with "
                                "compiled=True: 'bytes'")
        self.packed = wire == "bytes"
        self.compiled = bool(compiled)
        self.name = "ray-cgraph" if self.compiled else "ray"
        self.address = address
        self.actors = int(actors)
        self.init_options = dict(init_options or {})
        self._own_namespace = namespace is None
        self.namespace = namespace or _new_namespace()
        self.round_timeout = round_timeout
        self.started_ray = False
        self.groups: list[Group] = []
        self.host_names: dict[int, str] = {}
        self._hosts: dict[int, Any] = {}  # gid -> actor handle
        self._step_calls: dict[int, Any] = {}  # gid -> bound actor method `step`
        self._graph = None
        self._graph_slot: dict[int, int] = {}  # gid -> position of the host's input and output in the graph
        self._closed = False

    # -- placement ----------------------------------------------------------------------------------------
    def plan(self, roles: list[RoleSpec]) -> list[Group]:
        return split_roles(roles, {spec.role: self.actors for spec in roles if len(spec.node_ids) > 1})

    def _ensure_ray(self) -> None:
        if ray.is_initialized():
            return
        if self.address is None or self.address == "local":
            options = {
                "num_cpus": os.cpu_count() or 1,
                "include_dashboard": False,
                "object_store_memory": _DEFAULT_OBJECT_STORE_BYTES,
                "log_to_driver": False,
            }
        else:  # joining a running cluster: its resources are not ours to size
            options = {"log_to_driver": False}
        options.update(self.init_options)
        ray.init(address=self.address, **options)
        self.started_ray = True

    # -- engine interface ---------------------------------------------------------------------------------
    def deploy(self, groups: list[Group], seed: int) -> None:
        if self._hosts:
            raise RuntimeError("this RayEngine is already deployed; close it first, or build a new engine")
        if self._closed and self._own_namespace:  # deployed before: the old names may not be released yet
            self.namespace = _new_namespace()
        self._closed = False
        self.host_names = {}
        self._ensure_ray()
        self.groups = list(groups)
        used: set[str] = set()
        try:
            for g in self.groups:
                name = g.host if g.host not in used else f"{g.host}#{g.gid}"
                used.add(name)
                self.host_names[g.gid] = name
                handle = NodeHost.options(name=name, namespace=self.namespace).remote(name)
                self._hosts[g.gid] = handle
                self._step_calls[g.gid] = handle.step_packed if self.packed else handle.step
            self._get([self._hosts[g.gid].deploy.remote(g.program, g.node_ids, g.node_data, seed)
                       for g in self.groups])
            if self.compiled:
                self._compile()
        except BaseException:
            self.close()
            raise

    def _compile(self) -> None:
        from ray.dag import InputNode, MultiOutputNode

        gids = [g.gid for g in self.groups]
        self._graph_slot = {gid: j for j, gid in enumerate(gids)}
        with InputNode() as inp:
            dag = MultiOutputNode([self._hosts[gid].step_graph.bind(inp[j]) for j, gid in enumerate(gids)])
        with _quiet(_CGRAPH_LOGGER):
            self._graph = dag.experimental_compile()

    def step(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]:
        if self._graph is not None:
            return self._step_graph(round_, inboxes)
        gids = list(inboxes)
        calls = self._step_calls
        if self.packed:
            refs = [calls[g].remote(encode_inbox(round_, inboxes[g])) for g in gids]
            return {g: decode_outbox(out) for g, out in zip(gids, self._get(refs))}
        refs = [calls[g].remote(round_, inboxes[g]) for g in gids]
        return dict(zip(gids, self._get(refs)))

    def _step_graph(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]:
        """One execution of the compiled graph: every host runs, those without mail return None at once."""
        slot = self._graph_slot
        work: list = [None] * len(slot)
        for gid, inbox in inboxes.items():
            work[slot[gid]] = encode_inbox(round_, inbox)
        refs = self._graph.execute(*work)
        timeout = -1 if self.round_timeout is None else self.round_timeout  # -1: no limit for a compiled graph
        try:
            outs = ray.get(refs, timeout=timeout)
        except RayTaskError as err:
            _raise_original(err)
        return {gid: decode_outbox(outs[slot[gid]]) for gid in inboxes}

    def observe(self, gids: list[int] | None = None) -> dict[int, Any]:
        gids = [g.gid for g in self.groups] if gids is None else list(gids)
        return dict(zip(gids, self._get([self._hosts[g].observe.remote() for g in gids])))

    def ping(self) -> bool:
        """True when every host answers."""
        return all(self._get([h.ping.remote() for h in self._hosts.values()]))

    def _get(self, refs: list) -> list:
        """`ray.get` over one call per host; a node program's exception is re-raised as itself."""
        try:
            return ray.get(refs, timeout=self.round_timeout)
        except RayTaskError as err:
            _raise_original(err)

    # -- lifetime -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Tear down the compiled graph, kill the host actors, and stop Ray if this engine started it.

        Safe to call more than once, and after a failure.
        """
        if self._closed:
            return
        self._closed = True
        graph, self._graph = self._graph, None
        if graph is not None:
            try:
                with _quiet(_CGRAPH_LOGGER):
                    graph.teardown()
            except Exception:  # noqa: BLE001 - keep closing: the actors are killed next
                pass
        hosts, self._hosts = self._hosts, {}
        self._step_calls = {}
        if ray.is_initialized():
            for handle in hosts.values():
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - an actor that is already gone is fine
                    pass
        if self.started_ray:
            self.started_ray = False
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001
                pass

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        return (f"RayEngine(name={self.name!r}, actors={self.actors}, namespace={self.namespace!r}, "
                f"hosts={list(self.host_names.values())})")
