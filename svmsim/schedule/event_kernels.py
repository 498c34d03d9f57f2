"""The gossip event loop in numba: one loop for every host of every engine.

A host is the event loop of the nodes it owns (`owner[node] == me`): the in-process engine runs one host that owns
every node; the Ray engine runs one per actor. Events sit in one array heap keyed by ``(time, priority,
sequence)``: the priority orders the kinds of event that fall on the same instant (crash, leave, recover, join,
delivery, clock tick), the sequence number is the order of insertion. Every random draw (clock gaps, latencies,
faults, churn) is counter based (`core.streams`), so a node's k-th draw does not depend on how events interleave.

The loop calls a program's compiled form (`program.GossipKernel`) and sends what it writes: a message to a node
of this host goes on the heap after its latency; a message to another host's node goes, with its arrival time, to
an outgoing buffer that the host hands to its engine. `schedule.event_host.EventHost` is the Python side (set-up,
buffers, metering, and the loop's Python twin for programs without a kernel).

The helpers and the loop are compiled without reference counting (``_nrt=False``: they allocate nothing): the
counting of the many array arguments at every call cost about half the loop's throughput.
"""
from __future__ import annotations

import math
import sys
from typing import Callable

import numba
import numpy as np

from ..core.jit import inner
from ..core.streams import counter_uniform, standard_normal
from ..core.timing import churn_gap, sample_duration, tick_gap
from ..comm.codec_kernels import CODEC_PLAN, channel_encode
from ..numerics.csr import is_edge, sorted_position
from ..numerics.prefetch import prefetch
from .loop_cache import cached_loop

# event priorities at equal times
P_CRASH, P_LEAVE, P_RECOVER, P_JOIN, P_DELIVER, P_WAKE = 0, 1, 2, 3, 4, 5
# causes in records: record code = kind * 16 + duplicate * 8 + cause
CAUSE_DELIVERED, CAUSE_LOST, CAUSE_DEAD_RECEIVER, CAUSE_IN_FLIGHT, CAUSE_DEAD_SENDER = 0, 1, 2, 3, 4
CAUSE_NAMES = {CAUSE_DELIVERED: "delivered", CAUSE_LOST: "lost", CAUSE_DEAD_RECEIVER: "dead_receiver",
               CAUSE_IN_FLIGHT: "in_flight_at_end", CAUSE_DEAD_SENDER: "dead_sender"}
DROPPED_CAUSES = (CAUSE_LOST, CAUSE_DEAD_RECEIVER, CAUSE_DEAD_SENDER)
# node events in the fault log
NODE_CRASH, NODE_RECOVER, NODE_LEAVE, NODE_JOIN = 0, 1, 2, 3
NODE_EVENT_NAMES = ("crash", "recover", "leave", "join")
# loop status
(ST_QUIESCENT, ST_TIME, ST_DONE, ST_MESSAGES, ST_SCALARS, ST_EVAL_TIME, ST_EVAL_MSG, ST_YIELD, ST_FLUSH, ST_GROW,
 ST_BAD_EDGE, ST_XFLUSH, ST_DONE_CHANGE) = range(13)
NO_LIMIT = np.iinfo(np.int64).max


def _record(*fields, dtype=np.int64) -> np.dtype:
    """A numpy record type of `fields`: names, or (name, dtype) pairs (the rest `dtype`)."""
    return np.dtype([f if isinstance(f, tuple) else (f, dtype) for f in fields], align=True)


# The loop's state, in numpy records that the compiled loop and its Python side read by name. One record each:
#: the run's virtual-time model (`GossipSetting`): clock jitter, fault rates, the alpha-beta latency and fault delay
#: distributions (their codes and parameters), bandwidth, the per-edge latency spread, the meter's round length,
#: churn's rate, downtime and whether a node that rejoins keeps its state, the node count
MODEL = _record(*((f, np.float64) for f in (
    "jitter", "drop", "duplicate", "delay", "latency_a", "latency_b", "delay_a", "delay_b", "bandwidth",
    "edge_spread", "round_time", "churn_rate", "churn_downtime")),
    "periodic", "latency_code", "delay_code", "nodes", "churn_keeps_state")
#: a host's counters, updated in place: events on the heap, the next sequence number, free pool slots, buffered
#: records and log rows, clock ticks and events handled, messages and scalars sent, whether the programs say they are
#: done, delayed copies, the ends of a send along no edge, messages waiting for other hosts, late arrivals, buffered
#: node work records
COUNTERS = _record("heap", "seq", "free", "records", "log", "wakes", "sent", "sent_scalars", "events", "done",
                   "delayed", "bad_src", "bad_dst", "out", "late", "work")
#: a host's clock: the time of its last event, the next evaluation time, the slice's end, summed lateness of late
#: arrivals
CLOCK = _record("now", "next_eval", "max_time", "lateness", dtype=np.float64)
#: a slice's limits: messages and scalars sent, the next evaluation's message count, events between wall-clock checks;
#: `drain`: only deliveries are handled; `xbatch`: hand back once this many messages wait for other hosts;
#: `pause_done`: hand back whenever the programs' `done` signal changes (conservative time windows)
LIMITS = _record("max_messages", "max_scalars", "next_eval_msg", "yield_every", "drain", "xbatch", "pause_done")
# One record per node, event, message:
#: per node: the epoch of its clock (a tick of an earlier epoch is stale), clock ticks drawn, messages sent, how many
#: of its crashes or leaves last, crashed for good (0/1), churn's counter
NODE_STATE = _record("epoch", "ticks", "sent", "down", "dead", "churn")
#: per node: the keys of its random streams
NODE_KEYS = _record("clock", "latency", "fault", "churn", dtype=np.uint64)
#: per heap entry (beside its time): priority, sequence number, the node (or a delivery's pool slot), a flag (a tick's
#: epoch, a crash for good, a recovery with state)
HEAP_KEY = _record("prio", "seq", "subject", "flag")
#: per message in the pool: its ends, kind, the meter's round of its send time and which duplicate copy it is
POOL_ENTRY = _record("src", "dst", "tag", "bin", "copy")
#: per metered fate: the round of the send time, the ends and the code kind * 16 + duplicate * 8 + cause
FATE = _record("bin", "src", "dst", "code")
#: per event whose program counted work (`GossipKernel.counts`): the meter's round of the event's time, the node,
#: the quantity (its index in `GossipKernel.quantities`) and the amount the event added
NODE_WORK = _record("bin", "node", "quantity", "amount")
#: per change of a node (beside its time): the node and its event (`NODE_EVENT_NAMES`)
NODE_EVENT = _record("node", "event")
#: per message for another host (beside its arrival time and payload): that host, the ends, kind, round, copy
OUTGOING = _record("host", "src", "dst", "tag", "bin", "copy")
#: per message that arrives from another host (beside its arrival time and payload)
ARRIVAL = _record("src", "dst", "bin", "copy")
#: per event pushed before a run (beside its time): priority, node, flag
EVENT = _record("prio", "node", "flag")


@numba.njit(cache=True)
def churn_duration(model, key, counter):
    """Churn's next up- or down-time of a node (`core.timing.churn_gap` with the run's churn settings)."""
    return churn_gap(model[0].churn_rate, model[0].churn_downtime, key, counter)


@numba.njit(cache=True)
def next_tick(model, keys, rates, node, k):
    """Gap before tick `k` of `node`'s clock (tick 0 is the first one after time 0)."""
    return tick_gap(model[0].periodic, rates[node], model[0].jitter, counter_uniform(keys[node].clock, k), k == 0)


@numba.njit(cache=True)
def first_events(model, keys, rates, churn):
    """Every node's first clock tick and, with `churn`, its first departure: (tick times, departure times; empty
    without churn), as `next_tick` and `churn_duration` give them one node at a time."""
    n = keys.shape[0]
    ticks = np.empty(n)
    leaves = np.empty(n if churn else 0)
    for node in range(n):
        ticks[node] = next_tick(model, keys, rates, node, 0)
        if churn:
            leaves[node] = churn_duration(model, keys[node].churn, 0)
    return ticks, leaves


@inner
def _copy_latency(model, keys, src, c, copy, factor, nbytes):
    """Latency of one copy (0 or 1) of message c of `src`, and whether it was delayed by a fault."""
    lkey = keys[src].latency
    base = c * 4 + 2 * copy
    lat = sample_duration(model[0].latency_code, model[0].latency_a, model[0].latency_b, counter_uniform(lkey, base),
                  counter_uniform(lkey, base + 1)) * factor + nbytes / model[0].bandwidth
    delayed = 0
    if model[0].delay > 0.0:
        fkey = keys[src].fault
        fbase = c * 8 + 2 + 3 * copy
        if counter_uniform(fkey, fbase) < model[0].delay:
            lat += sample_duration(model[0].delay_code, model[0].delay_a, model[0].delay_b,
                                   counter_uniform(fkey, fbase + 1), counter_uniform(fkey, fbase + 2))
            delayed = 1
    return lat, delayed


@numba.njit(cache=True)
def send_fate(model, keys, edge_key, src, dst, c, nbytes):
    """Fate of message c of `src`: (copies, delayed copies, latency 1, latency 2); copies is 0 (lost), 1 or 2
    (duplicated)."""
    fkey = keys[src].fault
    if model[0].drop > 0.0 and counter_uniform(fkey, c * 8) < model[0].drop:
        return 0, 0, 0.0, 0.0
    factor = 1.0
    if model[0].edge_spread > 0.0:
        lo = min(src, dst)
        e = lo * model[0].nodes + (src + dst - lo)
        factor = math.exp(model[0].edge_spread * standard_normal(counter_uniform(edge_key, 2 * e),
                                                           counter_uniform(edge_key, 2 * e + 1)))
    lat1, d1 = _copy_latency(model, keys, src, c, 0, factor, nbytes)
    if model[0].duplicate > 0.0 and counter_uniform(fkey, c * 8 + 1) < model[0].duplicate:
        lat2, d2 = _copy_latency(model, keys, src, c, 1, factor, nbytes)
        return 2, d1 + d2, lat1, lat2
    return 1, d1, lat1, 0.0


# ----------------------------------------------------------------------------------------------------------------
# The compiled event loop
# ----------------------------------------------------------------------------------------------------------------


@inner
def heap_push(ht, hk, ctr, t, prio, a, b):
    """Push event (t, prio, next sequence number; a, b) on the array heap (ht: times, hk: prio, seq, a, b)."""
    seq = ctr[0].seq
    ctr[0].seq = seq + 1
    heap_insert(ht, hk, ctr, t, prio, seq, a, b)


@inner
def heap_insert(ht, hk, ctr, t, prio, seq, a, b):
    """Put event (t, prio, seq; a, b) on the array heap with a sequence number drawn before (`heap_push`)."""
    i = ctr[0].heap
    ctr[0].heap = i + 1
    while i > 0:
        p = (i - 1) >> 1
        tp = ht[p]
        if tp < t or (tp == t and (hk[p].prio < prio or (hk[p].prio == prio and hk[p].seq < seq))):
            break
        ht[i] = tp
        hk[i].prio = hk[p].prio
        hk[i].seq = hk[p].seq
        hk[i].subject = hk[p].subject
        hk[i].flag = hk[p].flag
        i = p
    ht[i] = t
    hk[i].prio = prio
    hk[i].seq = seq
    hk[i].subject = a
    hk[i].flag = b


@inner
def before_heap_top(ht, hk, ctr, t, prio, seq):
    """Whether event (t, prio, seq) comes before every event on the heap (an empty heap: yes)."""
    if ctr[0].heap == 0:
        return True
    return t < ht[0] or (t == ht[0] and (prio < hk[0].prio or (prio == hk[0].prio and seq < hk[0].seq)))


@numba.njit(cache=True)
def heap_pop(ht, hk, ctr):
    """Pop the smallest (time, prio, seq) event; returns (t, prio, a, b)."""
    t = ht[0]
    prio = hk[0].prio
    a = hk[0].subject
    b = hk[0].flag
    n = ctr[0].heap - 1
    ctr[0].heap = n
    if n > 0:
        lt = ht[n]
        lp = hk[n].prio
        ls = hk[n].seq
        la = hk[n].subject
        lb = hk[n].flag
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            r = c + 1
            if r < n and (ht[r] < ht[c] or (ht[r] == ht[c] and (hk[r].prio < hk[c].prio or (
                    hk[r].prio == hk[c].prio and hk[r].seq < hk[c].seq)))):
                c = r
            tc = ht[c]
            if tc < lt or (tc == lt and (hk[c].prio < lp or (hk[c].prio == lp and hk[c].seq < ls))):
                ht[i] = tc
                hk[i].prio = hk[c].prio
                hk[i].seq = hk[c].seq
                hk[i].subject = hk[c].subject
                hk[i].flag = hk[c].flag
                i = c
            else:
                break
        ht[i] = lt
        hk[i].prio = lp
        hk[i].seq = ls
        hk[i].subject = la
        hk[i].flag = lb
    return t, prio, a, b


# The event handling below is `_event_loop`'s; `EventHost._run_python` is its Python twin. These
# helpers and the loops are compiled without reference counting (``_nrt=False``: they allocate nothing), as
# the counting of the many array arguments at every call cost about half the loop's throughput.

@numba.njit(cache=True, _nrt=False)
def _log_node_event(log_t, log_i, ctr, t, node, event):
    g = ctr[0].log
    ctr[0].log = g + 1
    log_t[g] = t
    log_i[g].node = node
    log_i[g].event = event


@numba.njit(_nrt=False)
def _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, model, log_t, log_i, ctr, t, prio, node, b):
    """A crash, leave, recover or join of `node` at time t (b: the event's flag: crash for good, recover with state).
    Counts the node down or up (a node is down while any of its crashes or leaves lasts), draws churn's next
    event, stops or restarts its clock (the epoch), calls the program's crash or recover hook and logs the change."""
    if prio == P_CRASH or prio == P_LEAVE:
        if prio == P_CRASH:
            if b == 1:
                ni[node].dead = 1
            event = NODE_CRASH
        else:
            if ni[node].dead == 1:
                return                                     # a dead node's churn ends
            c = ni[node].churn
            heap_push(ht, hk, ctr, t + churn_duration(model, keys[node].churn, 2 * c + 1), P_JOIN, node, 0)
            event = NODE_LEAVE
        ni[node].down += 1
        if ni[node].down == 1:
            ni[node].epoch += 1
            crash_fn(prog, node)
            _log_node_event(log_t, log_i, ctr, t, node, event)
    else:
        if prio == P_RECOVER:
            keep = b == 1
            event = NODE_RECOVER
        else:
            c = ni[node].churn
            ni[node].churn = c + 1
            heap_push(ht, hk, ctr, t + churn_duration(model, keys[node].churn, 2 * c + 2), P_LEAVE, node, 0)
            keep = model[0].churn_keeps_state == 1
            event = NODE_JOIN
        if ni[node].down > 0:
            ni[node].down -= 1
            if ni[node].down == 0 and ni[node].dead == 0:
                ni[node].epoch += 1
                k = ni[node].ticks
                ni[node].ticks = k + 1
                heap_push(ht, hk, ctr, t + next_tick(model, keys, rates, node, k), P_WAKE, node,
                           ni[node].epoch)
                recover_fn(prog, node, keep)
                _log_node_event(log_t, log_i, ctr, t, node, event)


@numba.njit(_nrt=False)
def _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk, mi, mp, free, ni, rates, keys,
                  model, rec, log_t, log_i, ctr, fc, out_dst, out_tag, out_pay, t, prio, a, b):
    """Handle the event (t, prio, a, b) just popped off the heap. Returns (ran, n_out, done, sender): whether a
    program's wake or receive ran (then its n_out messages in the out arrays are to be sent from `sender`, and
    `done` is its signal), or not (a stale tick, a delivery to a node that is down, a node event)."""
    if prio == P_WAKE:
        if b != ni[a].epoch:
            return False, 0, False, a                      # a tick of a clock stopped by a crash
        fc[0].now = t
        ctr[0].events += 1
        k = ni[a].ticks
        ni[a].ticks = k + 1
        heap_push(ht, hk, ctr, t + next_tick(model, keys, rates, a, k), P_WAKE, a, b)
        ctr[0].wakes += 1
        n_out, done = wake_fn(prog, a, t, out_dst, out_tag, out_pay)
        return True, n_out, done, a
    fc[0].now = t
    ctr[0].events += 1
    if prio != P_DELIVER:
        _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, model, log_t, log_i, ctr, t, prio, a, b)
        return False, 0, False, a
    src = mi[a].src
    dst = mi[a].dst
    tag = mi[a].tag
    r = ctr[0].records
    ctr[0].records = r + 1
    rec[r].bin = mi[a].bin
    rec[r].src = src
    rec[r].dst = dst
    if ni[dst].down > 0:
        rec[r].code = tag * 16 + mi[a].copy * 8 + CAUSE_DEAD_RECEIVER
        free[ctr[0].free] = a
        ctr[0].free += 1
        return False, 0, False, dst
    rec[r].code = tag * 16 + mi[a].copy * 8 + CAUSE_DELIVERED
    n_out, done = receive_fn(prog, dst, src, tag, mp[a, :widths[tag]], t, out_dst, out_tag, out_pay)
    free[ctr[0].free] = a
    ctr[0].free += 1
    return True, n_out, done, dst


@numba.njit(cache=True, _nrt=False)
def _send(model, keys, edge_key, adj_ptr, adj, widths, tag_bytes, ni, rec, ctr, round_time, t, sender, d, tag):
    """Send a message of kind `tag` from `sender` to `d` at time t, in the compiled loops: check the edge, count
    it, draw its fate (`_send_fate`; its bandwidth term reads the kind's bytes on the wire, `tag_bytes`) and record
    it if it is lost. Returns (copies, latency 1, latency 2, round
    bin): copies is -1 if (sender, d) is not an edge (the pair is left in ctr[0].bad_src, ctr[0].bad_dst),
    0 if the message is lost, else 1 or 2 copies to deliver after latency 1 and 2."""
    if not is_edge(adj_ptr, adj, sender, d):
        ctr[0].bad_src = sender
        ctr[0].bad_dst = d
        return -1, 0.0, 0.0, np.int64(0)
    c = ni[sender].sent
    ni[sender].sent = c + 1
    w = widths[tag]
    ctr[0].sent += 1
    ctr[0].sent_scalars += w
    bin_ = np.int64(t / round_time)
    copies, delayed, lat1, lat2 = send_fate(model, keys, edge_key, sender, d, c, tag_bytes[tag])
    if copies == 0:
        r = ctr[0].records
        ctr[0].records = r + 1
        rec[r].bin = bin_
        rec[r].src = sender
        rec[r].dst = d
        rec[r].code = tag * 16 + CAUSE_LOST
        return 0, lat1, lat2, bin_
    ctr[0].delayed += delayed
    return copies, lat1, lat2, bin_


@numba.njit(cache=True, _nrt=False)
def _fill_slot(ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w):
    """Put copy `copy` of a message (payload: the first w scalars of row k of `out_pay`) in a free pool slot;
    returns the slot."""
    ctr[0].free -= 1
    slot = free[ctr[0].free]
    mi[slot].src = sender
    mi[slot].dst = d
    mi[slot].tag = tag
    mi[slot].bin = bin_
    mi[slot].copy = copy
    for q in range(w):
        mp[slot, q] = out_pay[k, q]
    return slot


@numba.njit(cache=True, _nrt=False)
def _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w, arrive):
    """Put copy `copy` of a message (payload: the first w scalars of `pay`) in a pool slot and on the heap, to
    be delivered at `arrive`."""
    slot = _fill_slot(ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w)
    heap_push(ht, hk, ctr, arrive, P_DELIVER, slot, 0)


@numba.njit(cache=True, _nrt=False)
def has_room(ctr, ht, extra, max_out):
    """Whether the message pool and the heap hold `extra` more messages and then an event's output."""
    return ctr[0].free >= extra + 2 * max_out and ctr[0].heap + extra + 2 * max_out + 2 <= ht.shape[0]


@numba.njit(cache=True, _nrt=False)
def _no_room(ctr, ht, rec, log_t, work, n_quantities, max_out):
    """ST_GROW if the pool or the heap may not hold the next event's messages, ST_FLUSH if the records, the
    log or the work records may not; -1 if there is room."""
    if not has_room(ctr, ht, 0, max_out):
        return ST_GROW
    if (ctr[0].records + 2 * max_out + 1 > rec.shape[0] or ctr[0].log + 1 > log_t.shape[0]
            or ctr[0].work + n_quantities > work.shape[0]):
        return ST_FLUSH
    return -1


@numba.njit(cache=True, _nrt=False)
def _note_work(counts, seen, work, ctr, node, bin_):
    """A `NODE_WORK` record for each node quantity whose counter `node`'s event raised (counts[q, node] against
    seen[q, node], which then catches up)."""
    for q in range(counts.shape[0]):
        now = counts[q, node]
        before = seen[q, node]
        if now != before:
            w = ctr[0].work
            ctr[0].work = w + 1
            work[w].bin = bin_
            work[w].node = node
            work[w].quantity = q
            work[w].amount = now - before
            seen[q, node] = now


@numba.njit(cache=True, _nrt=False)
def _encode_out(codec, codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx, adj_ptr, adj,
                sender, n_out, out_dst, out_tag, out_pay):
    """Encode the messages an event wrote (`comm.compression.Compressor.apply`, one message at a time: a kernel
    writes at most one per event, so none is a broadcast): each kind's codec (`codec_kernels.CODEC_PLAN`
    records; code -1: raw) in place in out_pay, the error feedback's state in a row per edge of the topology
    (codec_state[plan.state, the edge's position in adj]), counted per kind in codec_sent. A message along no edge
    is left as it is (the send refuses it)."""
    for k in range(n_out):
        tag = out_tag[k]
        p = codec[tag]
        codec_sent[tag] += 1
        if p.code < 0:
            continue
        e = 0
        if p.ef != 0:
            e = sorted_position(adj_ptr, adj, sender, out_dst[k])
            if e >= adj_ptr[sender + 1] or adj[e] != out_dst[k]:
                continue
        channel_encode(p, codec_state[max(p.state, 0), e], codec_keys, codec_drawn, tag, sender, out_pay[k],
                       codec_buf, codec_idx)


#: below this many nodes the rows stay in the caches and the loop does not prefetch
PREFETCH_MIN_NODES = 8192


@numba.njit(_nrt=False)
def _prefetch_node(prefetch_fn, prog, ni, keys, rates, adj_ptr, node):
    """Prefetch what an event of `node` reads: its loop state, its random keys and rate, its adjacency, and the
    program's rows (`GossipKernel.prefetch`). Changes nothing."""
    prefetch(ni, node)
    prefetch(keys, node)
    prefetch(rates, node)
    prefetch(adj_ptr, node)
    prefetch_fn(prog, node)


@numba.njit(nogil=True, _nrt=False)
def _event_loop(wake_fn, receive_fn, crash_fn, recover_fn, prefetch_fn, prog, widths, ht, hk, mi, mp, free, ni,
                rates, keys, edge_key, model, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc, lim, out_dst,
                out_tag, out_pay, xi, xt, xp, counts, seen, work, tag_bytes, codec, codec_state, codec_keys,
                codec_drawn, codec_sent, codec_buf, codec_idx, remote, encoding):
    """The gossip event loop, compiled: events of the nodes that `owner` gives to host `me`, in (time, priority,
    sequence) order, until Python is needed: a budget, an evaluation point, a full buffer, every `yield_every`
    events (wall-clock checks). The loop's state: `MODEL`, `COUNTERS`, `CLOCK` and `LIMITS` records (model, ctr,
    fc, lim), per node `NODE_STATE` and `NODE_KEYS` (ni, keys), the heap (times ht, `HEAP_KEY` records hk), the
    message pool (`POOL_ENTRY` records mi, payloads mp, free slots), the fates and node events to meter (`FATE`
    records rec; times log_t and `NODE_EVENT` records log_i). A message to a node of this host goes on the heap; a
    message to another host's node goes to the outgoing buffer (xi: `OUTGOING` records, xt: arrival times, xp:
    payloads). After a program's wake or receive, what it added to its node counters (`GossipKernel.counts`, seen
    so far: `seen`) becomes a `NODE_WORK` record (work). With `encoding` (a compile-time constant, like `remote`),
    the messages an event wrote are encoded before they are sent (`_encode_out`; `tag_bytes`: each kind's bytes on
    the wire, which the latency's bandwidth term reads). While draining (`lim.drain`) only deliveries are handled; `done` is then left to the engine (in
    `ctr.done`) instead of ending the slice, and with `lim.pause_done` the loop hands back after every event that
    changed it.
    `remote` is a compile-time constant of `loop_for`: a host that owns every node compiles none of that.
    Statement for statement the same as `EventHost._run_python`, so both give the same run, but for one thing that
    changes no order: a delivery due at the current time (latency 0) waits in a lane of one instead of the heap and
    is taken when its (time, priority, sequence) comes before the heap's top, as it would have been popped; this
    spares a push to the top and a pop through every level of a heap that no longer fits the caches (12 % of a
    10^5-node Push-Sum run). The lane goes back on the heap, with its sequence number, before the loop returns."""
    max_out = out_dst.shape[0]
    n_quantities = counts.shape[0]
    round_time = model[0].round_time
    draining = remote and lim[0].drain != 0
    prefetching = model[0].nodes >= PREFETCH_MIN_NODES
    since_yield = 0
    lane = -1                                          # a delivery due now: its pool slot (-1: none), time, sequence
    lane_t = 0.0
    lane_seq = 0
    status = ST_QUIESCENT
    while True:
        from_lane = lane >= 0 and before_heap_top(ht, hk, ctr, lane_t, P_DELIVER, lane_seq)
        if ctr[0].heap == 0 and not from_lane:
            status = ST_QUIESCENT
            break
        t = lane_t if from_lane else ht[0]
        if not draining:
            if fc[0].next_eval <= t and fc[0].next_eval <= fc[0].max_time:
                status = ST_EVAL_TIME
                break
            if t > fc[0].max_time:
                status = ST_TIME
                break
        room = _no_room(ctr, ht, rec, log_t, work, n_quantities, max_out)
        if room >= 0:
            status = room
            break
        if remote and (ctr[0].out + 2 * max_out > xi.shape[0] or ctr[0].out >= lim[0].xbatch):
            status = ST_XFLUSH
            break
        if since_yield >= lim[0].yield_every:
            status = ST_YIELD
            break
        since_yield += 1
        if from_lane:
            prio, a, b = P_DELIVER, lane, 0
            lane = -1
        else:
            t, prio, a, b = heap_pop(ht, hk, ctr)
        if prefetching and not from_lane and ctr[0].heap > 0:    # the next event's node: its rows arrive meanwhile
            nxt = hk[0].subject if hk[0].prio != P_DELIVER else mi[hk[0].subject].dst
            if not remote or owner[nxt] == me:
                _prefetch_node(prefetch_fn, prog, ni, keys, rates, adj_ptr, nxt)
        if draining and prio != P_DELIVER:
            continue                                       # the clocks have stopped: only deliveries remain
        ran, n_out, done, sender = _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk,
                                                 mi, mp, free, ni, rates, keys, model, rec, log_t, log_i, ctr,
                                                 fc, out_dst, out_tag, out_pay, t, prio, a, b)
        if not ran:
            continue
        if n_quantities > 0:
            _note_work(counts, seen, work, ctr, sender, np.int64(t / round_time))
        for k in range(n_out if prefetching else 0):       # the receivers' rows (latency 0: their turn is next)
            if not remote or owner[out_dst[k]] == me:
                _prefetch_node(prefetch_fn, prog, ni, keys, rates, adj_ptr, out_dst[k])
        if encoding:
            _encode_out(codec, codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx, adj_ptr, adj,
                        sender, n_out, out_dst, out_tag, out_pay)
        bad_edge = False
        for k in range(n_out):
            d = out_dst[k]
            tag = out_tag[k]
            copies, lat1, lat2, bin_ = _send(model, keys, edge_key, adj_ptr, adj, widths, tag_bytes, ni, rec, ctr,
                                             round_time, t, sender, d, tag)
            if copies < 0:
                bad_edge = True
                break
            w = widths[tag]
            for copy in range(copies):
                arrive = t + (lat1 if copy == 0 else lat2)
                if (not remote or owner[d] == me) and lane < 0 and arrive == t:
                    lane = _fill_slot(ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w)
                    lane_t = arrive
                    lane_seq = ctr[0].seq                  # the number heap_push would have given it
                    ctr[0].seq = lane_seq + 1
                elif not remote or owner[d] == me:
                    _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w, arrive)
                else:                                      # another host's node: into the outgoing buffer
                    x = ctr[0].out
                    ctr[0].out = x + 1
                    xi[x].host = owner[d]
                    xi[x].src = sender
                    xi[x].dst = d
                    xi[x].tag = tag
                    xi[x].bin = bin_
                    xi[x].copy = copy
                    xt[x] = arrive
                    for q in range(w):
                        xp[x, q] = out_pay[k, q]
        if bad_edge:
            status = ST_BAD_EDGE
            break
        changed = ctr[0].done != (1 if done else 0)
        ctr[0].done = 1 if done else 0
        if done and not remote:
            status = ST_DONE
            break
        if remote and changed and lim[0].pause_done != 0:
            status = ST_DONE_CHANGE                        # a time window's host: the engine notes when
            break
        if ctr[0].sent >= lim[0].max_messages:
            status = ST_MESSAGES
            break
        if ctr[0].sent_scalars >= lim[0].max_scalars:
            status = ST_SCALARS
            break
        if ctr[0].sent >= lim[0].next_eval_msg:
            status = ST_EVAL_MSG
            break
    if lane >= 0:                                      # the lane back on the heap: Python sees a plain heap
        heap_insert(ht, hk, ctr, lane_t, P_DELIVER, lane_seq, lane, 0)
    return status


_LOOPS: dict[tuple, Callable] = {}


def loop_for(kernel, remote: bool, encoding: bool = False) -> Callable:
    """`_event_loop` with a `GossipKernel`'s functions, `remote` (whether other hosts own nodes) and `encoding`
    (whether messages are compressed) bound as compile-time constants (direct calls that numba can inline; the in-process loop compiles no remote branch).
    Loaded from numba's cache on disk where the functions can be imported by name (`loop_cache`: a few seconds
    of compilation once, a fraction of a second after); else compiled once per process, set of functions and
    `remote` (numba cannot cache a loop that closes over functions)."""
    key = (kernel.wake, kernel.receive, kernel.crash, kernel.recover, kernel.prefetch, bool(remote), bool(encoding))
    loop = _LOOPS.get(key)
    if loop is None:
        loop = cached_loop(sys.modules[__name__], *key)
    if loop is not None:
        _LOOPS[key] = loop
    else:
        wake, receive, crash, recover, prefetch_, remote_, encoding_ = key

        @numba.njit(nogil=True)
        def loop(prog, widths, ht, hk, mi, mp, free, ni, rates, keys, edge_key, model, adj_ptr, adj, owner, me,
                 rec, log_t, log_i, ctr, fc, lim, out_dst, out_tag, out_pay, xi, xt, xp, counts, seen, work,
                 tag_bytes, codec, codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx):
            return _event_loop(wake, receive, crash, recover, prefetch_, prog, widths, ht, hk, mi, mp, free, ni,
                               rates, keys, edge_key, model, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc,
                               lim, out_dst, out_tag, out_pay, xi, xt, xp, counts, seen, work, tag_bytes, codec,
                               codec_state, codec_keys, codec_drawn, codec_sent, codec_buf, codec_idx, remote_,
                               encoding_)

        loop = _LOOPS[key] = loop
    return loop


@numba.njit(nogil=True, cache=True)
def push_arrivals(ht, hk, ctr, fc, mi, mp, free, tag, arrivals, times, payload):
    """Put messages that arrived from another host (`ARRIVAL` records) on the heap at max(arrival time, now); count
    the late ones."""
    now = fc[0].now
    w = payload.shape[1]
    for r in range(arrivals.shape[0]):
        ctr[0].free -= 1
        slot = free[ctr[0].free]
        m = arrivals[r]
        mi[slot].src = m.src
        mi[slot].dst = m.dst
        mi[slot].tag = tag
        mi[slot].bin = m.bin
        mi[slot].copy = m.copy
        for q in range(w):
            mp[slot, q] = payload[r, q]
        t = times[r]
        if t < now:
            ctr[0].late += 1
            fc[0].lateness += now - t
            t = now
        heap_push(ht, hk, ctr, t, P_DELIVER, slot, 0)


@numba.njit(cache=True)
def push_events(ht, hk, ctr, times, events):
    """Push `EVENT` records at `times` on the heap, in order."""
    for i in range(times.shape[0]):
        e = events[i]
        heap_push(ht, hk, ctr, times[i], e.prio, e.node, e.flag)
