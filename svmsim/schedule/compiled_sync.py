"""The compiled form of synchronous rounds: `SyncScheduler`'s loop in numba, for any number of groups (and of
nodes) whose programs offer a `SyncKernel` (in-process engine, no fault model, no message log).

One call runs rounds until something needs Python: an iteration boundary the observer wants (after its settle
round), a budget, the end, a program asking for a pause, or full ledger buffers. The rules are the Python
loop's, round for round: the groups with mail (and the woken ones) step once in gid order; what they send is
metered in that round and delivered in the next; an inbox is ordered by (tag, src, dst). Metering happens in
the loop into the buffers the meter lends (`Meter.compiled_buffers`: its own per-edge counters, indexed by the
topology's CSR edge ids, and per-tag, per-round and per-iteration buffers that `Meter.absorb` takes back), so the
ledger is the one the Python loop would write; bytes follow each tag's payload dtype, as on the Python path,
or with a run's `[compression]` its encoding (`step_encoding`: the messages encoded as the Python rounds encode
them, error feedback's channels taken from the `Compressor` and handed back).
A kernel's node-quantity `counts` are logged after each step (what it added, per member: `NODE_COUNT` records) and
metered per round after the call, as the Python loop meters `kernel_step`'s ``signals["counts"]``.
With a `cluster_time.ClusterClock` the loop also keeps the modelled time, with the clock's own numba functions
(each stepped group's declared work, then the round's messages on the links), so it equals the Python rounds'.
The groups' steps are called directly: the distinct step functions sit in a tuple with the arrays of their groups
(groups of one program share its step, each with arrays of its own), and the loop has one branch per step.

Mail between calls lives in `CompiledMail` (fixed-size per-group buffers); `to_inboxes` / `from_inboxes` convert
to and from the Python loop's `Inbox`es, so the two loops can take turns (set-up rounds run in Python).
"""
from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Callable
import textwrap
import warnings

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.core.errors import NumbaExperimentalFeatureWarning

from ..comm.codec_kernels import CODEC_PLAN as _CODEC_PLAN
from ..comm.edges import next_edge_id
from ..comm.message import Inbox, MessageBatch
from ..errors import ProtocolError
from ..program import KERNEL_DONE, KERNEL_ERROR, KERNEL_PAUSE, KERNEL_WAKE, SyncKernel, kernel_dtypes
from .cluster_time import clock_message, clock_round, clock_work, idle_clock_state
from .loop_cache import cached_module, importable, module_compiled
from .step_encoding import encode_step

__all__ = ["CompiledMail", "run_compiled_rounds", "kernels_compatible", "work_readable", "loop_cacheable", "loop_ready",
           "ROUNDS",
           "QUIESCENT", "COMMUNICATION", "DONE", "BOUNDARY", "PAUSE", "FLUSH"]

# why the compiled loop returned (module constants, so that numba folds them)
ROUNDS = 0           # round budget reached with mail in flight
QUIESCENT = 1        # no mail and nobody to wake
COMMUNICATION = 2    # scalar budget reached
DONE = 3             # a program said the algorithm has finished (no iteration ended in that round)
BOUNDARY = 4         # an observed (or last) iteration ended and was settled: Python calls the observer
PAUSE = 5            # a program asked for Python (its `kernel` is asked again)
FLUSH = 6            # the per-round or per-iteration buffers are full
BAD_EDGE = 7         # a message on a non-edge: error_info = (tag, src, dst)
STEP_ERROR = 8       # a program reported a protocol error: error_info = (group, -1, -1)
OVERFULL = 9         # a step wrote more messages than its kernel's max_out: error_info = (group, count, -1)
UNHOSTED = 10        # a message to a node that no group hosts: error_info = (tag, src, dst)

#: the compiled loop's limits (-1: none) and its state, one record each (the loop updates the state in place)
LOOP_LIMITS = np.dtype([("max_rounds", np.int64), ("max_scalars", np.int64), ("max_iterations", np.int64),
                        ("observe_every", np.int64)])
LOOP_STATE = np.dtype([("round", np.int64), ("iteration", np.int64), ("scalars", np.int64),
                       ("n_round_log", np.int64), ("n_iteration_log", np.int64), ("done", np.int64),
                       ("swapped", np.int64), ("n_node_log", np.int64)])
#: one metered node quantity: what `member` of a step's group added to quantity `quantity` (an index into the run's
#: names of the kernels' quantities) in `round`
NODE_COUNT = np.dtype([("round", np.int64), ("node", np.int64), ("quantity", np.int64), ("amount", np.int64)])
#: one round's metered totals, and what its steps reported (an ended iteration, or -1; done; pause)
ROUND_COUNTS = np.dtype([("messages", np.int64), ("scalars", np.int64), ("bytes", np.int64)])
ROUND_SIGNALS = np.dtype([("iteration", np.int64), ("done", np.int64), ("pause", np.int64)])

# how a payload entry of a tag is stored in flight (the compiled loop's buffers hold float64): as it is, rounded to
# float32, or truncated to an integer, as `kernel_step` casts a Python-path payload to the tag's dtype
_AS_IS, _AS_FLOAT32, _AS_INT = 0, 1, 2


def unhosted_error(tag: str, src: int, dst: int) -> ProtocolError:
    """The error for a message to a node that is on the topology but that no group hosts (both loops raise it)."""
    return ProtocolError(f"node {src} sent a {tag!r} message to node {dst}, which no group hosts, so nothing would "
                         "receive it; allowed: messages to the nodes the run's groups host")


def kernels_compatible(kernels: list[SyncKernel]) -> bool:
    """The programs of one deployment must agree on the tag table to share the compiled loop."""
    first = kernels[0]
    return all(k.tags == first.tags and np.array_equal(k.widths, first.widths)
               and kernel_dtypes(k) == kernel_dtypes(first) for k in kernels)


def _payload_rules(kernel: SyncKernel) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per scalar, storage rule) per tag, from the tags' payload dtypes."""
    dtypes = kernel_dtypes(kernel)
    itemsizes = np.array([d.itemsize for d in dtypes], np.int64)
    rules = np.array([_AS_IS if d == np.float64 else _AS_FLOAT32 if d == np.float32 else _AS_INT
                      for d in dtypes], np.int64)
    return itemsizes, rules


class CompiledMail:
    """Messages in flight to each group (tag, src, dst, payload rows) and the groups to wake."""

    def __init__(self, n_groups: int, capacity: int, width: int):
        self.tag = np.zeros((n_groups, capacity), np.int64)
        self.src = np.zeros((n_groups, capacity), np.int64)
        self.dst = np.zeros((n_groups, capacity), np.int64)
        self.payload = np.zeros((n_groups, capacity, width))
        self.count = np.zeros(n_groups, np.int64)
        self.wake = np.zeros(n_groups, np.bool_)

    def swap(self, other: "CompiledMail") -> None:
        """Exchange the contents with `other` (the compiled loop alternates between two buffers)."""
        for name in ("tag", "src", "dst", "payload", "count", "wake"):
            mine = getattr(self, name)
            setattr(self, name, getattr(other, name))
            setattr(other, name, mine)

    def from_inboxes(self, mail: dict[int, Inbox], wake: set[int], tag_id: dict[str, int]) -> None:
        self.count[:] = 0
        self.wake[:] = False
        for gid in wake:
            self.wake[gid] = True
        for gid, inbox in mail.items():
            k = 0
            for tag, batch in inbox.items():
                m = batch.n_messages
                if k + m > self.tag.shape[1]:
                    raise ProtocolError(f"{k + m} messages in flight to one group exceed the compiled loop's "
                                        f"capacity of {self.tag.shape[1]} (the kernels' max_out)")
                self.tag[gid, k:k + m] = tag_id[tag]
                self.src[gid, k:k + m] = batch.src
                self.dst[gid, k:k + m] = batch.dst
                self.payload[gid, k:k + m, :] = 0.0
                self.payload[gid, k:k + m, :batch.scalars_per_message] = batch.rows()
                k += m
            self.count[gid] = k

    def to_inboxes(self, tags: tuple, widths: np.ndarray, dtypes: tuple | None = None
                   ) -> tuple[dict[int, Inbox], set[int]]:
        """The mail as the Python loop's inboxes (payloads in the tags' `dtypes`, float64 by default)."""
        mail: dict[int, Inbox] = {}
        for gid in np.flatnonzero(self.count):
            n = int(self.count[gid])
            t, s, d = self.tag[gid, :n], self.src[gid, :n], self.dst[gid, :n]
            order = np.lexsort((d, s, t))
            inbox = Inbox()
            for tid in np.unique(t):
                rows = order[t[order] == tid]
                payload = self.payload[gid, rows, :widths[tid]]
                if dtypes is not None and dtypes[tid] != payload.dtype:
                    payload = payload.astype(dtypes[tid])
                inbox[tags[tid]] = MessageBatch(tags[tid], s[rows].copy(), d[rows].copy(), payload)
            mail[int(gid)] = inbox
        return mail, {int(g) for g in np.flatnonzero(self.wake)}


def _borrow(context, builder, ty, value):
    """`value` of type `ty` with every array in it (at any depth of tuples) borrowed: see `_borrowed`."""
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=value)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        out = cgutils.get_null_value(context.get_value_type(ty))
        for i, item_ty in enumerate(ty):
            item = _borrow(context, builder, item_ty, builder.extract_value(value, i))
            out = builder.insert_value(out, item, i)
        return out
    return value


@intrinsic
def _borrowed(typingctx, arrays):
    """The arrays of a tuple (and of the tuples in it) as borrowed views: the same data without their
    memory-manager reference, so that numba's reference counting skips them (each pass of an array through a call
    otherwise costs two atomic operations, which dominated a round). Only for arrays that Python keeps alive for
    the whole call."""
    if not isinstance(arrays, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        return _borrow(context, builder, sig.args[0], args[0])

    return arrays(arrays), codegen


@numba.njit(cache=True, nogil=True)
def _sort_inbox(tag, src, dst, payload, n):
    """Stable insertion sort of rows 0..n-1 by (tag, src, dst): linear on the usual already-ordered mail."""
    w = payload.shape[1]
    for i in range(1, n):
        t, s, d = tag[i], src[i], dst[i]
        j = i - 1
        while j >= 0 and (tag[j] > t or (tag[j] == t and (src[j] > s or (src[j] == s and dst[j] > d)))):
            j -= 1
        j += 1
        if j == i:
            continue
        row = payload[i].copy()
        for k in range(i, j, -1):
            tag[k] = tag[k - 1]
            src[k] = src[k - 1]
            dst[k] = dst[k - 1]
            for c in range(w):
                payload[k, c] = payload[k - 1, c]
        tag[j], src[j], dst[j] = t, s, d
        for c in range(w):
            payload[j, c] = row[c]


@numba.njit(cache=True, nogil=True)
def _meter_and_route(n_out, out_tag, out_src, out_dst, out_payload, x_tag, x_src, x_dst, x_pay, x_n, node_group,
                     n_nodes, widths, tag_bytes, rules, convert, edges, ptr, nbr, lookup, by_tag, counters, error_info,
                     clock):
    """Count a step's messages (edges, tags, this round; `tag_bytes`: a message's bytes on the wire per tag, its
    payload's or its encoding's) and post them to the receivers' next inboxes; returns
    BAD_EDGE (with error_info = tag, src, dst) for a message off the topology, UNHOSTED for one to a node no group
    hosts, else -1. `convert`: some tag's payload is not float64 (see `rules`; when False the loop is the plain
    copy). With the clock on, each message joins the round's messages on the links (`cluster_time.clock_message`)."""
    timed = clock.on[0]
    e = -1
    s = -1
    for r in range(n_out):
        t = out_tag[r]
        d = out_dst[r]
        if lookup.shape[0] == 0:
            e = next_edge_id(ptr, nbr, n_nodes, out_src[r], d, s, e)
            s = out_src[r]
        else:
            s = out_src[r]
            e = lookup[s * n_nodes + d] if 0 <= s < n_nodes and 0 <= d < n_nodes else -1
        if e < 0 or node_group[d] < 0:
            error_info[0] = t
            error_info[1] = s
            error_info[2] = d
            return BAD_EDGE if e < 0 else UNHOSTED
        sc = widths[t]
        by = tag_bytes[t]
        edges[0, e] += 1
        edges[1, e] += sc
        edges[2, e] += by
        by_tag[t, 0] += 1
        by_tag[t, 1] += sc
        by_tag[t, 2] += by
        counts = counters[0]
        counts.messages += 1
        counts.scalars += sc
        counts.bytes += by
        if timed:
            clock_message(clock, s, d, e, float(by))
        dg = node_group[d]
        k = x_n[dg]
        x_tag[dg, k] = t
        x_src[dg, k] = s
        x_dst[dg, k] = d
        rule = rules[t] if convert else _AS_IS
        if rule == _AS_IS:
            for c in range(sc):
                x_pay[dg, k, c] = out_payload[r, c]
        elif rule == _AS_FLOAT32:
            for c in range(sc):
                x_pay[dg, k, c] = np.float64(np.float32(out_payload[r, c]))
        else:
            for c in range(sc):
                x_pay[dg, k, c] = np.float64(np.int64(out_payload[r, c]))
        x_n[dg] = k + 1
    return -1


_ENCODING = False    # written out as True in the rounds of a run that encodes (see `_loop_text`)


@numba.njit(cache=True, nogil=True)
def _note_counts(counts, metered, at, names, nodes, round_, node_log, state):
    """Log what a step added to its kernel's node-quantity totals (`counts`, quantities x members) since
    `metered` (flat, from index `at`), per member and quantity (`names`: the run's index of each quantity), and
    bring `metered` up to date."""
    k = state[0].n_node_log
    members = counts.shape[1]
    for q in range(counts.shape[0]):
        for m in range(members):
            i = at + q * members + m
            amount = counts[q, m] - metered[i]
            if amount != 0:
                node_log[k].round = round_
                node_log[k].node = nodes[m]
                node_log[k].quantity = names[q]
                node_log[k].amount = amount
                metered[i] = counts[q, m]
                k += 1
    state[0].n_node_log = k


def _STEP_OF_KIND(kinds, kind, slot, *args):  # noqa: N802 - stands for the written-out branches
    """A placeholder in `_loop_source`: `_loop` writes its call out as one direct call per kind."""
    raise NotImplementedError("_loop_source runs only as compiled by _loop")


def _WORK_OF_KIND(kinds, kind, slot, no_work):  # stands for the written-out branches
    """A placeholder in `_loop_source`: `_loop` writes it out as the kind's work array (an item of its state, see
    `_work_slot`), or `no_work` for kinds that declare none."""
    raise NotImplementedError("_loop_source runs only as compiled by _loop")


def _COUNTS_OF_KIND(kinds, kind, slot, no_counts):  # noqa: N802 - stands for the written-out branches
    """A placeholder in `_loop_source`: `_loop` writes it out as the kind's counts array (an item of its state, see
    `_state_slot`), or `no_counts` for kinds that count no node quantity."""
    raise NotImplementedError("_loop_source runs only as compiled by _loop")


def _loop_source(kinds, kind_of, slot_of, n_groups, a_tag, a_src, a_dst, a_pay, a_n, a_wake, b_tag, b_src, b_dst, b_pay,
          b_n, b_wake, node_group, n_nodes, widths, tag_bytes, rules, convert, edges, ptr, nbr, lookup, by_tag, out_tag,
                 out_src, out_dst, out_payload, round_log, iteration_log, limits, state, error_info, max_outs, clock,
                 group_ptr, group_nodes, no_work, node_log, node_room, metered, metered_at, names, names_at, no_counts,
                 codec, codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx, codec_where,
                 codec_hash):
    """Rounds until Python is needed, for any number of groups. kinds: one (index, step, arrays of its groups)
    entry per distinct step (and arrays type); group g runs the step of entry ``kind_of[g]`` on the entry's arrays
    ``[slot_of[g]]`` (`_loop` compiles this source with the `_STEP_OF_KIND` line written out as direct calls).
    a_*: the mail (and wake flags) in flight; b_*: scratch for the next round (the two swap after each round).
    limits: one `LOOP_LIMITS` record (-1: no limit). state: one `LOOP_STATE` record, updated in place (round,
    iteration, scalars so far, rows used in the round and iteration logs, done at the boundary, 1 if the mail now
    lives in b_*).
    clock: a `cluster_time.ClockState` (its `on` False when no modelled time is kept): a stepped group's
    members (group_nodes[group_ptr[g]:group_ptr[g + 1]]) compute for their step's declared work
    (`_WORK_OF_KIND`, or `no_work`), and the round's messages then cross the links (`clock_round`).
    node_log: `NODE_COUNT` records of what the steps added to their kernels' node-quantity counts
    (`_COUNTS_OF_KIND`, see `_note_counts`; group g's are flat in metered[metered_at[g]:], its quantities'
    indices in names[names_at[g]:]); node_room: the most one round can log.
    codec...: a run that encodes its messages (`_ENCODING`, written out by `_loop_text`) encodes each step's output
    before it is metered (`step_encoding.encode_step`); tag_bytes: a message's bytes on the wire per tag.
    Returns why it stopped."""
    lim = limits[0]
    max_rounds, max_scalars, max_iterations, observe_every = (lim.max_rounds, lim.max_scalars, lim.max_iterations,
                                                              lim.observe_every)
    st = state[0]
    kinds = _borrowed(kinds)
    (a_tag, a_src, a_dst, a_pay, a_n, a_wake, b_tag, b_src, b_dst, b_pay, b_n, b_wake, node_group, widths, tag_bytes,
     rules, edges, ptr, nbr, lookup, by_tag, o_tag, o_src, o_dst, o_pay, round_log, iteration_log) = _borrowed(
        (a_tag, a_src, a_dst, a_pay, a_n, a_wake, b_tag, b_src, b_dst, b_pay, b_n, b_wake, node_group, widths,
         tag_bytes, rules, edges, ptr, nbr, lookup, by_tag, out_tag, out_src, out_dst, out_payload, round_log,
         iteration_log))
    clock = _borrowed(clock)
    timed = clock.on[0]
    # this round's messages, scalars and bytes, and what its steps reported; read and written as counters[0].x and
    # signals[0].x: a record taken out once would point into the array after numba has let the array go
    counters = np.zeros(1, ROUND_COUNTS)
    signals = np.zeros(1, ROUND_SIGNALS)
    stepped = np.zeros(3, np.int64)         # (n_out, iteration, flags) of the last step
    settle = False
    while True:
        round_ = st.round
        if not settle:
            pending = a_n.sum() > 0 or a_wake.any()
            if max_rounds >= 0 and round_ >= max_rounds and pending:
                return ROUNDS
            if not pending:
                return QUIESCENT
            if (st.n_round_log + 2 > round_log.shape[0] or st.n_iteration_log >= iteration_log.shape[0]
                    or st.n_node_log + node_room > node_log.shape[0]):
                return FLUSH
        b_n[:] = 0
        if settle:
            b_wake[:] = a_wake        # a settle round leaves the woken groups for the round after
        else:
            b_wake[:] = False
        counters[0].messages = 0
        counters[0].scalars = 0
        counters[0].bytes = 0
        signals[0].iteration = -1
        signals[0].done = 0
        signals[0].pause = 0
        for g in range(n_groups):        # step the groups with mail (and the woken ones) in gid order
            n_in = a_n[g]
            if not (n_in > 0 or (a_wake[g] and not settle)):
                continue
            _sort_inbox(a_tag[g], a_src[g], a_dst[g], a_pay[g], n_in)
            r = _STEP_OF_KIND(kinds, kind_of[g], slot_of[g], round_, a_tag[g], a_src[g], a_dst[g], a_pay[g], n_in,
                              o_tag, o_src, o_dst, o_pay)
            if timed:
                work = _WORK_OF_KIND(kinds, kind_of[g], slot_of[g], no_work)
                clock_work(clock, group_nodes[group_ptr[g]:group_ptr[g + 1]], work)
            counted = _COUNTS_OF_KIND(kinds, kind_of[g], slot_of[g], no_counts)
            if counted.shape[0] > 0:
                _note_counts(counted, metered, metered_at[g], names[names_at[g]:],
                             group_nodes[group_ptr[g]:group_ptr[g + 1]], round_, node_log, state)
            stepped[0] = r[0]
            stepped[1] = r[1]
            stepped[2] = r[2]
            n_out = stepped[0]
            it = stepped[1]
            flags = stepped[2]
            if flags & KERNEL_ERROR:
                error_info[0] = g
                return STEP_ERROR
            if n_out > max_outs[g]:
                error_info[0] = g
                error_info[1] = n_out
                return OVERFULL
            if _ENCODING:
                encode_step(n_out, o_tag, o_src, o_dst, o_pay, widths, codec, codec_state, codec_keys, codec_drawn,
                             codec_sent, codec_buf, codec_idx, codec_where, codec_hash, ptr, nbr)
            bad = _meter_and_route(n_out, o_tag, o_src, o_dst, o_pay, b_tag, b_src, b_dst, b_pay, b_n,
                                   node_group, n_nodes, widths, tag_bytes, rules, convert, edges, ptr, nbr, lookup,
                                   by_tag, counters, error_info, clock)
            if bad >= 0:
                return bad
            if it >= 0:
                signals[0].iteration = it
            if flags & KERNEL_WAKE:
                b_wake[g] = True
            if flags & KERNEL_DONE:
                signals[0].done = 1
            if flags & KERNEL_PAUSE:
                signals[0].pause = 1
        if timed:
            clock_round(clock)
        if counters[0].messages > 0:
            k = st.n_round_log
            round_log[k, 0] = round_
            round_log[k, 1] = counters[0].messages
            round_log[k, 2] = counters[0].scalars
            round_log[k, 3] = counters[0].bytes
            st.n_round_log = k + 1
            st.scalars += counters[0].scalars
        # the next round's mail is the scratch: swap the buffers (the caller swaps its two `CompiledMail`s
        # when state.swapped says an odd number of swaps happened)
        a_tag, b_tag = b_tag, a_tag
        a_src, b_src = b_src, a_src
        a_dst, b_dst = b_dst, a_dst
        a_pay, b_pay = b_pay, a_pay
        a_n, b_n = b_n, a_n
        a_wake, b_wake = b_wake, a_wake
        st.swapped = 1 - st.swapped
        st.round = round_ + 1
        if settle:
            return BOUNDARY
        if max_scalars >= 0 and st.scalars >= max_scalars:
            return COMMUNICATION
        completed = signals[0].iteration
        done = signals[0].done != 0
        if completed < 0:
            if done:
                return DONE
            if signals[0].pause != 0:
                return PAUSE
            continue
        st.iteration = completed
        iteration_log[st.n_iteration_log, 0] = completed
        iteration_log[st.n_iteration_log, 1] = round_
        st.n_iteration_log += 1
        last = (max_iterations >= 0 and completed >= max_iterations) or done
        st.done = 1 if done else 0
        if (observe_every > 0 and completed % observe_every == 0) or last:
            if a_n.sum() == 0:
                return BOUNDARY
            settle = True                   # one settle round: only the groups with mail, then the observer
            continue
        if signals[0].pause != 0:
            return PAUSE


_LOOPS: dict[tuple, object] = {}


def _placeholder(lines: list[str], name: str) -> tuple[int, int, str, str, list[str]]:
    """Where the call `target = name(kinds, kind, slot, rest...)` stands in `lines`: (first line, last line,
    indent, target, [kind, slot, rest])."""
    at = next(i for i, line in enumerate(lines) if f"{name}(" in line)
    end = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith(")"))
    call = " ".join(x.strip() for x in lines[at:end + 1])
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    target, args = call.split("=", 1)
    args = args[args.index("(") + 1:args.rindex(")")].split(",")
    return at, end, indent, target.strip(), [args[1].strip(), args[2].strip(), ",".join(args[3:])]


def _branches(indent: str, kind: str, calls: list[str]) -> list[str]:
    """One line per kind when there are several (``if kind == 0: ... else: ...``), the call itself for one."""
    if len(calls) == 1:
        return [indent + calls[0]]
    out = []
    for i, call in enumerate(calls):
        out.append(f"{indent}{'if' if i == 0 else 'elif'} {kind} == {i}:" if i < len(calls) - 1 else f"{indent}else:")
        out.append(f"{indent}    {call}")
    return out


_CACHED_PRELUDE = '''"""svmsim's compiled synchronous rounds with {names} bound (see svmsim.schedule.loop_cache)."""
import numba
import numpy as np

import {rounds} as _rounds

globals().update({{k: v for k, v in vars(_rounds).items() if not k.startswith("__")}})
{imports}


@numba.njit(cache=True, nogil=True)
'''


def _loop(singles: tuple, slots: tuple, steps: tuple | None = None, encoding: bool = False):
    """`_loop_source` compiled for kinds of steps with one group (True) or several (False) each: its
    `_STEP_OF_KIND(kinds, kind, slot, ...)` line becomes one branch per kind with a direct call of that kind's step
    on ``kinds[i][2][slot]``; the arrays of a kind with one group are taken out of the tuple once, before the rounds.
    `_WORK_OF_KIND` and `_COUNTS_OF_KIND` likewise become items ``slots[i]`` = (work, counts) of the kind's state
    (``no_work``, ``no_counts`` where -1).
    (A call through a helper function, or `numba.literal_unroll` over the kinds, cost a quarter of a microsecond per
    step, a quarter of the whole round of a small protocol; a branch on a constant index costs nothing measurable.)

    steps: each kind's step as ``(module, name)`` by which it can be imported: the loop then calls ``step_i``, a
    global of a module that `loop_cache` writes out and numba caches on disk (``kinds[i][1]`` is unused), so that
    another process loads it instead of compiling it again; None: the loop calls ``kinds[i][1]`` and is compiled in
    memory (also where the module cannot be written). encoding: the rounds encode each step's messages
    (`step_encoding.encode_step`); False compiles none of that."""
    key = (singles, slots, steps, bool(encoding))
    fn = _LOOPS.get(key)
    if fn is None:
        src = _loop_text(singles, slots, steps, encoding)
        if steps is not None:
            fn = _cached_loop(src, steps)
        if fn is None:
            namespace = dict(globals())
            exec(compile(src, f"<compiled_sync._loop for {len(singles)} kinds>", "exec"), namespace)
            fn = numba.njit(nogil=True)(namespace["_loop_compiled"])
        _LOOPS[key] = fn
    return fn


def _loop_text(singles: tuple, slots: tuple, steps: tuple | None, encoding: bool = False) -> str:
    """The source of `_loop`'s function ``_loop_compiled`` for these kinds (see `_loop`)."""
    lines = textwrap.dedent(inspect.getsource(_loop_source)).splitlines()

    def state_of(i, slot):
        return f"arrays_{i}" if singles[i] else f"_borrowed(kinds[{i}][2][{slot}])"

    def step_of(i):
        return f"step_{i}" if steps is not None else f"kinds[{i}][1]"

    at, end, indent, target, (kind, slot, rest) = _placeholder(lines, "_STEP_OF_KIND")
    calls = [f"{target} = {step_of(i)}({state_of(i, slot)},{rest})" for i in range(len(singles))]
    lines = lines[:at] + _branches(indent, kind, calls) + lines[end + 1:]
    for which, placeholder in enumerate(("_WORK_OF_KIND", "_COUNTS_OF_KIND")):
        at, end, indent, target, (kind, slot, rest) = _placeholder(lines, placeholder)
        calls = [f"{target} = {state_of(i, slot)}[{w[which]}]" if w[which] >= 0 else f"{target} = {rest.strip()}"
                 for i, w in enumerate(slots)]
        lines = lines[:at] + _branches(indent, kind, calls) + lines[end + 1:]
    top = next(i for i, line in enumerate(lines) if line.strip().startswith("kinds = "))
    pad = lines[top][:len(lines[top]) - len(lines[top].lstrip())]
    # the steps' arrays borrowed too (`_borrowed` of `kinds` reaches only its top level): reference counting
    # every array of a state at every step cost about a microsecond per Saddle-DSVC iteration
    hoisted = [f"{pad}arrays_{i} = _borrowed(kinds[{i}][2][0])" for i, single in enumerate(singles) if single]
    lines = lines[:top + 1] + hoisted + lines[top + 1:]
    text = "\n".join(lines).replace("def _loop_source(", "def _loop_compiled(")
    return text.replace("if _ENCODING:", f"if {bool(encoding)}:")


def _cached_text(src: str, steps: tuple) -> tuple[str, list]:
    """The module text of the cached loop of source `src` calling ``step_i`` = ``steps[i]``, and the modules it is
    compiled from."""
    imports = "\n".join(f"from {m} import {n} as step_{i}" for i, (m, n) in enumerate(steps))
    text = _CACHED_PRELUDE.format(names=", ".join(n for _, n in steps), rounds=__name__, imports=imports) + src
    text += "\n\nloop = _loop_compiled\n"
    return text, [sys.modules[__name__]] + [sys.modules[m] for m, _ in steps]


def loop_ready(kernels: list[SyncKernel], encoding: bool = False) -> bool:
    """Whether the compiled rounds of these kernels (encoding their messages or not) are in this process already or
    in numba's cache on disk (then switching to them costs a load, not a compilation: `SyncScheduler` switches at
    once)."""
    kinds, _, _, slots = _kinds(kernels)
    steps = _importable_steps(kinds)
    singles = tuple(len(k[2]) == 1 for k in kinds)
    if (singles, slots, steps, bool(encoding)) in _LOOPS:
        return True
    if steps is None:
        return False
    return module_compiled("svmsim_rounds", *_cached_text(_loop_text(singles, slots, steps, encoding), steps), steps)


def _cached_loop(src: str, steps: tuple):
    """The loop of source `src` calling ``step_i`` = ``steps[i]``, from a module numba caches on disk; None where
    it cannot be written."""
    text, modules = _cached_text(src, steps)
    module = cached_module("svmsim_rounds", text, modules, steps)
    return None if module is None else module.loop


def _state_slot(kernel: SyncKernel, array: np.ndarray | None) -> int:
    """The index of `array` (the kernel's `work` or `counts`) among its state's items; -1 when it is None, or not
    an item of the state, which the compiled loop cannot read (see `work_readable`)."""
    if array is not None:
        for i, a in enumerate(kernel.arrays):
            if a is array:
                return i
    return -1


def work_readable(kernel: SyncKernel) -> bool:
    """Whether the compiled loop can read the kernel's declared work (for the modelled time): none declared, or an
    item of its state; otherwise a clocked run keeps to the Python rounds, which read it from the step's signals."""
    return kernel.work is None or _state_slot(kernel, kernel.work) >= 0


_NO_WORK = np.zeros(0)
_NO_COUNTS = np.zeros((0, 0), np.int64)


def _type_key(x):
    """What numba's type of `x` depends on, cheaply for arrays (`numba.typeof` costs tens of microseconds each)."""
    if isinstance(x, np.ndarray):
        f = x.flags
        return (x.dtype, x.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    return numba.typeof(x)


def _kinds(kernels: list[SyncKernel]) -> tuple[tuple, np.ndarray, np.ndarray, tuple]:
    """(kinds, kind_of, slot_of, slots) for `_loop`: the groups gathered by step function and arrays type, in
    order of first appearance; groups of one kind share the compiled call and index their own arrays; slots: per
    kind, where its work and counts arrays are among its state's items."""
    index: dict[tuple, int] = {}
    members: list[list] = []
    steps: list = []
    kind_of = np.zeros(len(kernels), np.int64)
    slot_of = np.zeros(len(kernels), np.int64)
    for g, k in enumerate(kernels):
        key = (id(k.step), (_state_slot(k, k.work), _state_slot(k, k.counts)), tuple(_type_key(a) for a in k.arrays))
        i = index.get(key)
        if i is None:
            i = index[key] = len(members)
            members.append([])
            steps.append(k.step)
        kind_of[g] = i
        slot_of[g] = len(members[i])
        members[i].append(k.arrays)
    kinds = tuple((i, step, tuple(arrays)) for i, (step, arrays) in enumerate(zip(steps, members)))
    return kinds, kind_of, slot_of, tuple(key[1] for key in index)


def loop_cacheable(kernels: list[SyncKernel]) -> bool:
    """Whether the compiled rounds of these kernels come from numba's cache on disk (every step importable by
    its module and name: a module-level numba function), rather than compiled afresh in every process."""
    return _importable_steps(_kinds(kernels)[0]) is not None


def _importable_steps(kinds: tuple) -> tuple | None:
    """Each kind's step as (module, name) when every one can be imported by name, else None."""
    named = tuple(importable(step) for _, step, _ in kinds)
    return None if any(n is None for n in named) else named


class _NodeCounts:
    """The kernels' node-quantity counts for one call of the compiled loop: what each group has metered (flat, from
    the kernels' `metered`, written back by `meter`), the run's quantity names, and the log the loop fills."""

    def __init__(self, kernels: list[SyncKernel], group_ptr: np.ndarray):
        self.kernels = [k for k in kernels if k.counts is not None]
        names: list[str] = []
        for k in self.kernels:
            names += [q for q in k.quantities if q not in names]
        self.quantity_names = names
        self.metered_at = np.zeros(len(kernels), np.int64)
        self.names_at = np.zeros(len(kernels), np.int64)
        parts, index = [], []
        at = 0
        for g, k in enumerate(kernels):
            self.metered_at[g] = at
            self.names_at[g] = len(index)
            if k.counts is None:
                continue
            if group_ptr.shape[0] != len(kernels) + 1 or k.counts.shape[1] != group_ptr[g + 1] - group_ptr[g]:
                raise ProtocolError(f"the compiled step of group {g} counts node quantities for "
                                    f"{k.counts.shape[1]} members; allowed: one column per member of its group")
            parts.append(k.metered.ravel())
            index += [names.index(q) for q in k.quantities]
            at += k.counts.size
        self.metered = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        self.names = np.array(index, np.int64)
        self.room = int(self.metered.shape[0])
        self.log = np.zeros(max(4 * self.room, 1024) if self.room else 0, NODE_COUNT)

    def meter(self, meter, n: int) -> None:
        """Meter the first `n` log records (consecutive ones of one round and quantity together) and write back
        what each kernel has metered."""
        at = 0
        for k in self.kernels:
            k.metered.ravel()[:] = self.metered[at:at + k.counts.size]
            at += k.counts.size
        if n == 0:
            return
        log = self.log[:n]
        key = log["round"] * (len(self.quantity_names) + 1) + log["quantity"]
        cuts = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [n]])):
            meter.record_node(int(log["round"][lo]), self.quantity_names[int(log["quantity"][lo])],
                              log["node"][lo:hi], log["amount"][lo:hi])


@contextlib.contextmanager
def _failing_round(state, mail, scratch, buffers, widths, tag_bytes, codec_sent, counting, meter, tags, on_failure,
                   settle_codec):
    """Around a call of the loop: if a step raises, take the failing round's messages back out of the meter's
    counters and the encoder's counts (the Python rounds meter a round after all its steps), meter the rounds
    before, say which round failed, and let the exception go on."""
    try:
        yield
    except Exception:
        st = state[0]
        failing = int(st["round"])
        routed = scratch if not st["swapped"] else mail          # the loop's next-round buffer at the failure
        ptr, nbr = buffers.ptr, buffers.nbr
        for g in np.flatnonzero(routed.count).tolist():
            for k in range(int(routed.count[g])):
                t, src, dst = int(routed.tag[g, k]), int(routed.src[g, k]), int(routed.dst[g, k])
                e = int(ptr[src]) + int(np.searchsorted(nbr[ptr[src]:ptr[src + 1]], dst))
                sent = np.array([1, widths[t], tag_bytes[t]], np.int64)
                buffers.edges[:, e] -= sent
                buffers.by_tag[t] -= sent
                codec_sent[t] -= 1
        settle_codec()
        meter.absorb(buffers, tags, int(st["n_round_log"]), int(st["n_iteration_log"]))
        counting.meter(meter, int((counting.log["round"][:int(st["n_node_log"])] < failing).sum()))
        if on_failure is not None:
            on_failure(failing)
        raise


def run_compiled_rounds(kernels: list[SyncKernel], mail: CompiledMail, scratch: CompiledMail, node_group, meter,
                        *, round_: int, iteration: int, max_rounds, max_scalars, max_iterations,
                        observe_every: int, clock=None, group_nodes: list[np.ndarray] | None = None,
                        compression=None, codec_plans: np.ndarray | None = None,
                        on_failure: Callable[[int], None] | None = None) -> tuple[int, int, int, bool]:
    """Run the compiled loop once; meter into `meter`; with a `cluster_time.ClusterClock`, keep its modelled
    time (count mode: each group's declared work; `group_nodes`: each group's node ids, in member order); with a
    `comm.compression.Compressor` and its `codec_plans` for the kernels' tags (`Compressor.compiled_plans`), encode
    every message as its Python rounds would (its channels' state and uniforms drawn travel in and back out).
    A step that raises (numba's ZeroDivisionError on a compressed message, say) ends the call as it would end the
    Python rounds: the rounds before are metered, the failing round's messages are not, `on_failure` gets the
    failing round, and the exception goes on.
    Returns (status, round, iteration, done)."""
    for g, k in enumerate(kernels):
        nested = [i for i, a in enumerate(k.arrays) if isinstance(a, tuple)]
        if nested:               # `_borrowed` drops the references of the top level's arrays only
            raise ProtocolError(f"the compiled step of group {g} shares a state whose item {nested[0]} is itself a "
                                "tuple; allowed: a flat tuple (or named tuple) of arrays and scalars")
    tags = kernels[0].tags
    buffers = meter.compiled_buffers(len(tags))
    if buffers is None:
        raise ValueError("the compiled loop needs a meter with a topology and no message log")
    widths = np.ascontiguousarray(kernels[0].widths, dtype=np.int64)
    itemsizes, rules = _payload_rules(kernels[0])
    encoding = compression is not None
    tag_bytes = itemsizes * widths if not encoding else np.ascontiguousarray(codec_plans["nbytes"], np.int64)
    max_outs = np.array([k.max_out for k in kernels], np.int64)
    # room beyond the largest max_out, so that a step that overruns its promise is caught before harm is done
    room = 2 * int(max_outs.max()) + 16
    width = mail.payload.shape[2]
    out_tag = np.zeros(room, np.int64)
    out_src = np.zeros(room, np.int64)
    out_dst = np.zeros(room, np.int64)
    out_payload = np.zeros((room, width))
    none = -1
    limits = np.zeros(1, LOOP_LIMITS)
    limits[0] = (none if max_rounds is None else max_rounds, none if max_scalars is None else max_scalars,
                 none if max_iterations is None else max_iterations, observe_every or 0)
    state = np.zeros(1, LOOP_STATE)
    state[0] = (round_, iteration, meter.scalars, 0, 0, 0, 0, 0)
    st = state[0]
    error_info = np.full(3, -1, np.int64)
    kinds, kind_of, slot_of, slots = _kinds(kernels)
    steps = _importable_steps(kinds)
    if steps is not None:                # the loop calls them as its module's globals (cached on disk)
        kinds = tuple((i, i, arrays) for i, _, arrays in kinds)
    if group_nodes is None:
        group_ptr, members = np.zeros(1, np.int64), np.zeros(0, np.int64)
    else:
        group_ptr = np.concatenate([[0], np.cumsum([len(ids) for ids in group_nodes])]).astype(np.int64)
        members = np.concatenate([np.asarray(ids, np.int64) for ids in group_nodes]).astype(np.int64)
    if clock is None:
        clock_state = idle_clock_state()
    else:
        if not (np.array_equal(clock.ptr, buffers.ptr) and np.array_equal(clock.nbr, buffers.nbr)):
            raise ValueError("the clock and the meter must number the topology's edges alike")
        clock_state = clock.state(int(max_outs.sum()))
    counting = _NodeCounts(kernels, group_ptr)
    if encoding:
        codec = codec_plans
        codec_state, codec_drawn = compression.channel_arrays(codec_plans, tags, buffers.ptr, buffers.nbr)
        codec_keys = compression.stream_keys()
    else:
        codec = np.zeros(len(tags), _CODEC_PLAN)
        codec_state, codec_drawn, codec_keys = np.zeros((1, 1, 1)), np.zeros((1, 1), np.int64), np.zeros(1, np.uint64)
    codec_sent = np.zeros(len(tags), np.int64)
    codec_buf = np.zeros((3, width))
    codec_idx = np.zeros(width, np.int64)
    codec_where = np.zeros(room, np.int64)
    codec_hash = np.zeros(room, np.uint64)

    def settle_codec():
        if encoding:
            compression.take_channel_arrays(codec_plans, tags, buffers.ptr, buffers.nbr, codec_state, codec_drawn)
            compression.count_compiled(tags, widths, codec_sent, kernel_dtypes(kernels[0]))

    with warnings.catch_warnings(), _failing_round(state, mail, scratch, buffers, widths, tag_bytes, codec_sent,
                                                   counting, meter, tags, on_failure, settle_codec):
        # numba calls passing jitted functions as arguments "first-class function type: experimental"; the loop
        # makes direct calls to them (each dispatcher is part of the compiled signature)
        warnings.simplefilter("ignore", NumbaExperimentalFeatureWarning)
        status = _loop(tuple(len(k[2]) == 1 for k in kinds), slots, steps, encoding)(
            kinds, kind_of, slot_of, len(kernels), mail.tag, mail.src, mail.dst, mail.payload, mail.count, mail.wake,
            scratch.tag, scratch.src, scratch.dst, scratch.payload, scratch.count, scratch.wake, node_group,
            meter.n_nodes, widths, tag_bytes, rules, bool(rules.any()), buffers.edges, buffers.ptr, buffers.nbr,
            buffers.lookup, buffers.by_tag, out_tag, out_src, out_dst, out_payload, buffers.rounds, buffers.iterations,
            limits, state, error_info, max_outs, clock_state, group_ptr, members, _NO_WORK, counting.log,
            counting.room, counting.metered, counting.metered_at, counting.names, counting.names_at, _NO_COUNTS,
            codec, codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx, codec_where, codec_hash)
    settle_codec()
    meter.absorb(buffers, tags, int(st["n_round_log"]), int(st["n_iteration_log"]))
    counting.meter(meter, int(st["n_node_log"]))
    if st["swapped"]:
        mail.swap(scratch)
    if status == BAD_EDGE:
        t, s, d = (int(x) for x in error_info)
        meter.raise_bad_edge(tags[t], s, d)
    if status == UNHOSTED:
        t, s, d = (int(x) for x in error_info)
        raise unhosted_error(tags[t], s, d)
    if status == OVERFULL:
        g, n = int(error_info[0]), int(error_info[1])
        raise ProtocolError(f"the compiled step of group {g} sent {n} messages in one round, more than its kernel's "
                            f"max_out = {kernels[g].max_out}; allowed: at most max_out (raise it in the kernel)")
    if status == STEP_ERROR:
        k = kernels[int(error_info[0])]
        raise ProtocolError(k.error() if k.error is not None else "a compiled step reported an error")
    return int(status), int(st["round"]), int(st["iteration"]), bool(st["done"])
