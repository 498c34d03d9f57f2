"""Node programs: what a server, a client or a peer does, free of any transport.

Two kinds: a `NodeProgram` runs in synchronous rounds (optionally with a compiled `SyncKernel`); a `GossipProgram`
is woken by its node's clock and handed messages one event at a time (optionally with a compiled `GossipKernel`).
Algorithms, schedulers and engines import these interfaces from here; none of them imports another for them.

A `NodeProgram` runs one role over a *group* of logical nodes of that role at once (struct of arrays: a
group's state holds every member's data and variables, so a step is one vectorised or numba pass over the
group's whole shard, never a Python loop over points). It is the optax-like pair

    state = program.init(node_ids, node_data, seed)
    state, outbox = program.step(state, inbox, round_)

An engine decides how a role's nodes are split into groups (the in-process engine keeps one group per role;
the Ray engine gives each host actor a slice), so a program must give the same per-node results for any split:
per-node quantities are computed per node, and reductions over senders read inbox rows in (src, dst) order.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numba
import numpy as np

from .comm.message import Inbox, MessageBatch, Outbox, frozen_view
from .errors import ProtocolError

__all__ = ["NodeProgram", "RoleSpec", "NodeRows", "Ragged", "Group", "SyncKernel", "kernel_step", "kernel_dtypes", "KERNEL_WAKE",
           "KERNEL_DONE", "KERNEL_PAUSE", "KERNEL_ERROR", "GossipProgram", "GossipKernel", "frozen_view"]

#: flags a compiled step returns (bitwise or): step me next round / the algorithm has finished / return to
#: Python after this round (e.g. to refill a buffer; `kernel` is asked again) / protocol error (see `error`)
KERNEL_WAKE, KERNEL_DONE, KERNEL_PAUSE, KERNEL_ERROR = 1, 2, 4, 8


class NodeProgram:
    """Base class of node programs. Subclasses set `role` and implement `init`, `step`, `observe`."""

    role: str = "node"
    #: an initiator is stepped in round 0 with an empty inbox (e.g. the server that starts iteration 0)
    initiator: bool = False

    def init(self, node_ids: np.ndarray, node_data: list, seed: int) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def step(self, state: Any, inbox: Inbox, round_: int) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def observe(self, state: Any) -> Any:
        """A snapshot for the evaluator (the simulation's observer; not a message, never metered)."""
        return None

    def peek(self, state: Any) -> Any:
        """`observe` without its copies, for an evaluator that reads it at once: it may share memory with the state,
        so it holds only until the state next changes (a 10^6-node Push-Sum run saves a copy of every node's
        values per evaluation). Default: `observe`."""
        return self.observe(state)

    def kernel(self, state: Any) -> "SyncKernel | None":
        """The compiled form of `step` for the current state, or None (then only `step` runs).

        Asked again whenever the compiled loop returns to Python, so a program may offer its kernel only
        after a set-up phase, or refill buffers that its kernel drains."""
        return None


@dataclass
class SyncKernel:
    """A group's round step in compiled form, for the scheduler's compiled loop (`schedule.compiled_sync`).

    ``step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload)
    -> (n_out, iteration, flags)`` is a numba function acting in place on `arrays` (arrays the program's state
    shares, so `observe` sees the result). Inbox rows ``0..n_in-1`` are ordered by (tag, src, dst); tags are
    indices into `tags`, payload row k holds ``widths[tag]`` float64 scalars (the rest is padding). The step
    writes its messages to rows ``0..n_out-1`` of the out arrays (at most `max_out`), returns the iteration it
    completed (or -1) and `KERNEL_*` flags. The same step must also serve the Python path (`kernel_step`), so
    both paths give the same results by construction. Programs that talk to each other share one `tags` tuple.

    `work` (optional) is an array the step fills with each member's operations in its last step, in member order:
    the modelled cluster time (`schedule.cluster_time`) turns it into compute seconds.

    `quantities` and `counts` (optional): node quantities the step counts (e.g. ``"kernel_evaluations"``), as
    running totals it adds to in place: `counts` is an int64 array of shape (len(quantities), members), an item of
    `arrays` so that the compiled loop reads it. What a step adds is metered per member in that step's round, by
    either loop, like ``signals["counts"]`` (`metered`: the totals when the kernel was made, plus what has been
    metered since; so only the step may change `counts`).

    `dtypes` gives each tag's payload dtype on the wire (float64 when None; float32, int64 and int32 also
    allowed): messages carry their values cast to it, and the ledger's bytes are its item size per scalar.
    """

    arrays: tuple
    step: Callable
    tags: tuple
    widths: np.ndarray
    max_out: int
    error: Callable[[], str] | None = None   # describes the protocol error after a KERNEL_ERROR flag
    dtypes: tuple | None = None               # per tag: the payload dtype on the wire (None: all float64)
    work: np.ndarray | None = None            # per member: the operations its last step did (for modelled time)
    quantities: tuple = ()                    # names of the node quantities in `counts`
    counts: np.ndarray | None = None          # (quantities, members) int64 running totals the step adds to
    metered: np.ndarray | None = field(default=None, init=False, repr=False)   # the totals metered so far

    def __post_init__(self):
        if self.counts is None:
            if self.quantities:
                raise ProtocolError(f"a kernel names node quantities {self.quantities} but has no counts array")
            return
        c = self.counts
        if not (isinstance(c, np.ndarray) and c.dtype == np.int64 and c.ndim == 2 and c.flags.c_contiguous
                and c.shape[0] == len(self.quantities)):
            raise ProtocolError(f"a kernel's counts must be a C-contiguous int64 array of shape (len(quantities) = "
                                f"{len(self.quantities)}, members); got {getattr(c, 'dtype', type(c).__name__)} "
                                f"of shape {getattr(c, 'shape', None)}")
        if not any(a is c for a in self.arrays):
            raise ProtocolError("a kernel's counts must be an item of its arrays (the compiled loop reads it there)")
        self.metered = c.copy()

    def counted(self) -> dict | None:
        """The node quantities counted since the last call (``{quantity: per-member amounts}``, only those that
        moved), for ``signals["counts"]``; None when nothing moved."""
        if self.counts is None:
            return None
        delta = self.counts - self.metered
        moved = {q: delta[i] for i, q in enumerate(self.quantities) if delta[i].any()}
        self.metered[...] = self.counts
        return moved or None


_WIRE_DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.int32))


def kernel_dtypes(kernel: SyncKernel) -> tuple:
    """The payload dtype of each of the kernel's tags (float64 unless `dtypes` says otherwise)."""
    if kernel.dtypes is None:
        return (_WIRE_DTYPES[0],) * len(kernel.tags)
    dtypes = tuple(np.dtype(d) for d in kernel.dtypes)
    if len(dtypes) != len(kernel.tags):
        raise ProtocolError(f"a kernel gives {len(dtypes)} payload dtypes for its {len(kernel.tags)} tags")
    for tag, d in zip(kernel.tags, dtypes):
        if d not in _WIRE_DTYPES:
            raise ProtocolError(f"tag {tag!r} has payload dtype {d}; allowed: "
                                f"{', '.join(str(x) for x in _WIRE_DTYPES)}")
    return dtypes


def kernel_step(kernel: SyncKernel, inbox: Inbox, round_: int) -> Outbox:
    """Run one round of a compiled step from Python: an Inbox in, an Outbox out (the path engines other than
    the in-process one take)."""
    tags, widths = kernel.tags, kernel.widths
    width = int(widths.max())
    tag_id = {t: i for i, t in enumerate(tags)}
    parts = []
    for tag, batch in inbox.items():
        if tag not in tag_id:
            raise ProtocolError(f"a compiled step got a message with tag {tag!r}; it knows {', '.join(tags)}")
        parts.append((tag_id[tag], batch))
    parts.sort(key=lambda p: p[0])
    n_in = sum(b.n_messages for _, b in parts)
    in_tag = np.empty(n_in, np.int64)
    in_src = np.empty(n_in, np.int64)
    in_dst = np.empty(n_in, np.int64)
    in_payload = np.zeros((n_in, width))
    k = 0
    for t, batch in parts:
        m = batch.n_messages
        order = np.lexsort((batch.dst, batch.src))
        in_tag[k:k + m] = t
        in_src[k:k + m] = batch.src[order]
        in_dst[k:k + m] = batch.dst[order]
        in_payload[k:k + m, :batch.scalars_per_message] = batch.rows()[order]
        k += m
    room = 2 * kernel.max_out + 16          # beyond max_out, so that an overrun is caught before harm is done
    out_tag = np.empty(room, np.int64)
    out_src = np.empty(room, np.int64)
    out_dst = np.empty(room, np.int64)
    out_payload = np.zeros((room, width))
    n_out, iteration, flags = kernel.step(kernel.arrays, round_, in_tag, in_src, in_dst, in_payload, n_in,
                                          out_tag, out_src, out_dst, out_payload)
    if flags & KERNEL_ERROR:
        raise ProtocolError(kernel.error() if kernel.error is not None else "a compiled step reported an error")
    if n_out > kernel.max_out:
        raise ProtocolError(f"a compiled step sent {n_out} messages in one round, more than its kernel's max_out = "
                            f"{kernel.max_out}; allowed: at most max_out (raise it in the kernel)")
    dtypes = kernel_dtypes(kernel) if kernel.dtypes is not None else None
    out = Outbox()
    start = 0
    while start < n_out:                     # consecutive rows of one tag make one batch
        t = out_tag[start]
        end = start + 1
        while end < n_out and out_tag[end] == t:
            end += 1
        payload = out_payload[start:end, :widths[t]]
        payload = payload.copy() if dtypes is None or dtypes[t] == payload.dtype else payload.astype(dtypes[t])
        out.send(MessageBatch(tags[t], out_src[start:end].copy(), out_dst[start:end].copy(), payload))
        start = end
    signals = {}
    if iteration >= 0:
        signals["iteration"] = int(iteration)
    if flags & KERNEL_WAKE:
        signals["wake"] = True
    if flags & KERNEL_DONE:
        signals["done"] = True
    if kernel.work is not None:
        signals["work"] = kernel.work.copy()
    counted = kernel.counted()
    if counted:
        signals["counts"] = counted
    out.signals = signals or None
    return out


# -- gossip programs (asynchronous: woken by their clocks, handed messages one event at a time) -------------

# The default hooks take every program's arrays, so they are not cached on disk: numba's cache index of a function
# names the types it was compiled for, and a program's own types (a named tuple of a plugin's module) in svmsim's
# index would break every later process that cannot import that module. They compile in a fraction of a second;
# a loop that calls them is cached with them inside.

@numba.njit
def _kernel_no_crash(arrays, node):
    return


@numba.njit
def _kernel_no_recover(arrays, node, keep_state):
    return


@numba.njit
def _kernel_no_prefetch(arrays, node):
    return


@dataclass
class GossipKernel:
    """A program's compiled form, for the compiled event loop. All functions are numba-jitted and act in place on
    ``arrays`` (a tuple of arrays that the program's state shares, so `observe` sees the result):

    ``wake(arrays, node, t, out_dst, out_tag, out_payload) -> (n_out, done)``
    ``receive(arrays, dst, src, tag, payload, t, out_dst, out_tag, out_payload) -> (n_out, done)``
    ``crash(arrays, node)``, ``recover(arrays, node, keep_state)``
    ``prefetch(arrays, node)`` (optional): prefetch the node's rows (`numerics.prefetch`), called for the next
        event's node while the current one runs; it must change nothing

    A call writes its messages to rows ``0..n_out-1`` of the out arrays (sender: the event's node; payload row k
    holds ``widths[out_tag[k]]`` float64 scalars) and returns whether every node of the program has finished.
    The results must equal the program's Python methods exactly (the easy way: the methods call these functions).

    Node quantities (work a node did, `svmsim.comm.quantities`): ``counts`` is an int64 array of shape
    ``(len(quantities), nodes)``, by node id, that the kernel's `wake` and `receive` add to for the event's node
    (running totals; never lowered). After each event the loop meters what it added in the round of the event's
    time, as the Python methods' ``Outbox.signals["counts"] = {quantity: amount}`` is metered.
    """

    arrays: tuple
    wake: Callable
    receive: Callable
    tags: tuple
    widths: np.ndarray
    max_out: int = 1
    crash: Callable = _kernel_no_crash
    recover: Callable = _kernel_no_recover
    prefetch: Callable = _kernel_no_prefetch
    quantities: tuple = ()
    counts: np.ndarray | None = None


class GossipProgram(NodeProgram):
    """A peer program for the gossip scheduler; acts on a group of nodes (struct of arrays over the group).

    ``init(node_ids, node_data, seed) -> state``
    ``wake(state, nodes, times) -> (state, Outbox)``: the clocks of `nodes` ticked at `times` (event order); each
        may do local work and send messages (`MessageBatch` rows src -> dst; src must be the waking node).
    ``receive(state, batch, times) -> (state, Outbox)``: deliver the rows of `batch` (event order) that arrived at
        `times`; the result must equal processing the rows one at a time in that order. Replies are sent from the
        receiving node.
    ``observe(state)``: a snapshot for the evaluator (never metered); ``peek(state)`` the same without copies, valid
        until the state next changes; ``hand_over(state)`` the last one, when the run is over: it may hold the
        state's own arrays, for the deployment's model to reuse (default: `observe`).
    ``crash(state, nodes)`` / ``recover(state, nodes, keep_state)``: fault hooks (default: nothing happens; a
        recovered node without its state should restart from its initial state). Return the state.
    ``kernel(state) -> GossipKernel | None``: the compiled form, if the program has one.

    Randomness comes from per-node seeded streams in the state. ``Outbox.signals = {"done": True}`` says every
    node of this group has finished; the scheduler stops when all groups say so.
    """

    role = "peer"

    def wake(self, state: Any, nodes: np.ndarray, times: np.ndarray) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def receive(self, state: Any, batch: MessageBatch, times: np.ndarray) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def crash(self, state: Any, nodes: np.ndarray) -> Any:
        return state

    def recover(self, state: Any, nodes: np.ndarray, keep_state: bool) -> Any:
        return state

    def kernel(self, state: Any) -> GossipKernel | None:
        return None

    def hand_over(self, state: Any) -> Any:
        return self.observe(state)

    def step(self, state, inbox, round_):
        raise ProtocolError(f"{type(self).__name__} is a gossip program: it runs under the gossip scheduler "
                            "([schedule] kind = \"gossip\"), not in synchronous rounds")


@dataclass
class RoleSpec:
    """The nodes that play one role, their data, and the program they run."""

    role: str
    program: NodeProgram
    node_ids: np.ndarray
    node_data: list = field(default_factory=list)  # one entry per node id, in the same order

    def data_for(self, ids: np.ndarray) -> list:
        if isinstance(self.node_data, NodeRows):
            node_ids = np.asarray(self.node_ids, dtype=np.int64)
            ids = np.asarray(ids, dtype=np.int64)
            if np.array_equal(ids, node_ids):
                return self.node_data
            order = np.argsort(node_ids, kind="stable")
            at = order[np.minimum(np.searchsorted(node_ids, ids, sorter=order), len(order) - 1)]
            if not np.array_equal(node_ids[at], ids):
                raise KeyError(f"node {int(ids[node_ids[at] != ids][0])} is not one of role {self.role!r}'s nodes")
            return self.node_data.take(at)
        pos = {int(n): i for i, n in enumerate(self.node_ids)}
        return [self.node_data[pos[int(n)]] for n in ids] if self.node_data else [None] * len(ids)


class Ragged:
    """A column of per-node pieces of different lengths: node i's is ``values[ptr[i]:ptr[i + 1]]`` (values: an array
    or a CSR matrix, whose rows are the pieces' items). With `items` (row numbers of `values`), node i's piece is
    ``values[items[ptr[i]:ptr[i + 1]]]``: the pieces pick rows of a shared array (a data set) without a copy of them;
    `take` gathers them into a compact column."""

    def __init__(self, ptr: np.ndarray, values, items: np.ndarray | None = None):
        self.ptr, self.values = np.asarray(ptr, dtype=np.int64), values
        self.items = None if items is None else np.asarray(items, dtype=np.int64)
        if self.items is not None and self.ptr.shape[0] and self.items.shape[0] != self.ptr[-1]:
            raise ValueError(f"a Ragged column's items hold {self.items.shape[0]} rows, but its offsets end at "
                             f"{int(self.ptr[-1])}")

    def __len__(self) -> int:
        return self.ptr.shape[0] - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = range(len(self))[i]                    # negative positions count from the end; out of range: IndexError
        if self.items is not None:
            return self.values[self.items[self.ptr[i]:self.ptr[i + 1]]]
        return self.values[self.ptr[i]:self.ptr[i + 1]]

    def take(self, positions: np.ndarray) -> "Ragged":
        """The pieces at `positions`, in that order, gathered into a compact column (one gather, no loop over
        nodes)."""
        lens = np.diff(self.ptr)[positions]
        ptr = np.zeros(lens.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        items = np.repeat(self.ptr[positions] - ptr[:-1], lens) + np.arange(ptr[-1])
        return Ragged(ptr, self.values[items if self.items is None else self.items[items]])


class NodeRows(Sequence):
    """Per-node data as whole arrays, one row per node: entry i is ``{name: column[i] for each column}`` (built when
    asked for), so a million nodes' values are one array, not a million dicts; a `Ragged` column holds pieces of
    different lengths (a node's data points, its neighbours). A program that knows it reads the columns at once
    (``rows.columns``); any other reads its entries as dicts."""

    def __init__(self, **columns: np.ndarray):
        lengths = {len(c) for c in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"NodeRows needs columns of one length, got {sorted(lengths)}")
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        return {name: c[i] for name, c in self.columns.items()}

    def take(self, positions: np.ndarray) -> "NodeRows":
        """The rows at `positions`, in that order."""
        return NodeRows(**{name: c.take(positions) if isinstance(c, Ragged) else np.asarray(c)[positions]
                           for name, c in self.columns.items()})


@dataclass
class Group:
    """A slice of one role's nodes that an engine hosts and steps together."""

    gid: int
    role: str
    program: NodeProgram
    node_ids: np.ndarray
    node_data: list
    host: str  # name of the host (actor name on Ray, "inproc" otherwise)
