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
from ..numerics.csr import is_edge
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
# per-node integer state columns
I_EPOCH, I_TICKS, I_SENT, I_DOWN, I_DEAD, I_CHURN = range(6)
# key columns
K_CLOCK, K_LATENCY, K_FAULT, K_CHURN = range(4)
# float parameters
(E_JITTER, E_DROP, E_DUP, E_DELAY, E_LAT_A, E_LAT_B, E_DELAY_A, E_DELAY_B, E_BANDWIDTH, E_SPREAD,
 E_ROUND_TIME, E_CHURN_RATE, E_CHURN_DOWN) = range(13)
# integer parameters
C_PERIODIC, C_LAT, C_DELAY, C_N, C_CHURN_KEEP = range(5)
# loop counters (N_OUT: messages in the buffer for other hosts; N_LATE: messages from other hosts that arrived late)
(N_HEAP, N_SEQ, N_FREE, N_REC, N_LOG, N_WAKES, N_SENT, N_SENT_SCALARS, N_EVENTS, N_DONE, N_DELAYED, N_BAD_SRC,
 N_BAD_DST, N_OUT, N_LATE) = range(15)
N_COUNTERS = 16
# float settings (F_LATENESS: summed lateness of late arrivals) and integer limits (L_DRAIN: only deliveries are
# handled; L_XBATCH: hand back once this many messages wait for other hosts; L_PAUSE_DONE: hand back whenever the
# programs' `done` signal changes, for conservative time windows)
F_NOW, F_NEXT_EVAL, F_MAX_TIME, F_LATENESS = range(4)
L_MAX_MESSAGES, L_MAX_SCALARS, L_NEXT_EVAL_MSG, L_YIELD, L_DRAIN, L_XBATCH, L_PAUSE_DONE = range(7)
N_SETTINGS = 8
# loop status
(ST_QUIESCENT, ST_TIME, ST_DONE, ST_MESSAGES, ST_SCALARS, ST_EVAL_TIME, ST_EVAL_MSG, ST_YIELD, ST_FLUSH, ST_GROW,
 ST_BAD_EDGE, ST_XFLUSH, ST_DONE_CHANGE) = range(13)
NO_LIMIT = np.iinfo(np.int64).max
#: per message for another host: its host, src, dst, kind, round bin, duplicate copy (+ arrival time and payload)
X_HOST, X_SRC, X_DST, X_TAG, X_BIN, X_COPY = range(6)


@numba.njit(cache=True)
def churn_duration(env, key, counter):
    """Churn's next up- or down-time of a node (`core.timing.churn_gap` with the run's churn settings)."""
    return churn_gap(env[E_CHURN_RATE], env[E_CHURN_DOWN], key, counter)


@numba.njit(cache=True)
def next_tick(cfg, env, keys, rates, node, k):
    """Gap before tick `k` of `node`'s clock (tick 0 is the first one after time 0)."""
    return tick_gap(cfg[C_PERIODIC], rates[node], env[E_JITTER], counter_uniform(keys[node, K_CLOCK], k), k == 0)


@numba.njit(cache=True)
def first_events(cfg, env, keys, rates, churn):
    """Every node's first clock tick and, with `churn`, its first departure: (tick times, departure times; empty
    without churn), as `next_tick` and `churn_duration` give them one node at a time."""
    n = keys.shape[0]
    ticks = np.empty(n)
    leaves = np.empty(n if churn else 0)
    for node in range(n):
        ticks[node] = next_tick(cfg, env, keys, rates, node, 0)
        if churn:
            leaves[node] = churn_duration(env, keys[node, K_CHURN], 0)
    return ticks, leaves


@inner
def _copy_latency(env, cfg, keys, src, c, copy, factor, nbytes):
    """Latency of one copy (0 or 1) of message c of `src`, and whether it was delayed by a fault."""
    lkey = keys[src, K_LATENCY]
    base = c * 4 + 2 * copy
    lat = sample_duration(cfg[C_LAT], env[E_LAT_A], env[E_LAT_B], counter_uniform(lkey, base),
                  counter_uniform(lkey, base + 1)) * factor + nbytes / env[E_BANDWIDTH]
    delayed = 0
    if env[E_DELAY] > 0.0:
        fkey = keys[src, K_FAULT]
        fbase = c * 8 + 2 + 3 * copy
        if counter_uniform(fkey, fbase) < env[E_DELAY]:
            lat += sample_duration(cfg[C_DELAY], env[E_DELAY_A], env[E_DELAY_B], counter_uniform(fkey, fbase + 1),
                           counter_uniform(fkey, fbase + 2))
            delayed = 1
    return lat, delayed


@numba.njit(cache=True)
def send_fate(env, cfg, keys, edge_key, src, dst, c, nbytes):
    """Fate of message c of `src`: (copies, delayed copies, latency 1, latency 2); copies is 0 (lost), 1 or 2
    (duplicated)."""
    fkey = keys[src, K_FAULT]
    if env[E_DROP] > 0.0 and counter_uniform(fkey, c * 8) < env[E_DROP]:
        return 0, 0, 0.0, 0.0
    factor = 1.0
    if env[E_SPREAD] > 0.0:
        lo = min(src, dst)
        e = lo * cfg[C_N] + (src + dst - lo)
        factor = math.exp(env[E_SPREAD] * standard_normal(counter_uniform(edge_key, 2 * e),
                                                           counter_uniform(edge_key, 2 * e + 1)))
    lat1, d1 = _copy_latency(env, cfg, keys, src, c, 0, factor, nbytes)
    if env[E_DUP] > 0.0 and counter_uniform(fkey, c * 8 + 1) < env[E_DUP]:
        lat2, d2 = _copy_latency(env, cfg, keys, src, c, 1, factor, nbytes)
        return 2, d1 + d2, lat1, lat2
    return 1, d1, lat1, 0.0


# ----------------------------------------------------------------------------------------------------------------
# The compiled event loop
# ----------------------------------------------------------------------------------------------------------------


@inner
def heap_push(ht, hk, ctr, t, prio, a, b):
    """Push event (t, prio, next sequence number; a, b) on the array heap (ht: times, hk: prio, seq, a, b)."""
    seq = ctr[N_SEQ]
    ctr[N_SEQ] = seq + 1
    heap_insert(ht, hk, ctr, t, prio, seq, a, b)


@inner
def heap_insert(ht, hk, ctr, t, prio, seq, a, b):
    """Put event (t, prio, seq; a, b) on the array heap with a sequence number drawn before (`heap_push`)."""
    i = ctr[N_HEAP]
    ctr[N_HEAP] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        tp = ht[p]
        if tp < t or (tp == t and (hk[p, 0] < prio or (hk[p, 0] == prio and hk[p, 1] < seq))):
            break
        ht[i] = tp
        hk[i, 0] = hk[p, 0]
        hk[i, 1] = hk[p, 1]
        hk[i, 2] = hk[p, 2]
        hk[i, 3] = hk[p, 3]
        i = p
    ht[i] = t
    hk[i, 0] = prio
    hk[i, 1] = seq
    hk[i, 2] = a
    hk[i, 3] = b


@inner
def before_heap_top(ht, hk, ctr, t, prio, seq):
    """Whether event (t, prio, seq) comes before every event on the heap (an empty heap: yes)."""
    if ctr[N_HEAP] == 0:
        return True
    return t < ht[0] or (t == ht[0] and (prio < hk[0, 0] or (prio == hk[0, 0] and seq < hk[0, 1])))


@numba.njit(cache=True)
def heap_pop(ht, hk, ctr):
    """Pop the smallest (time, prio, seq) event; returns (t, prio, a, b)."""
    t = ht[0]
    prio = hk[0, 0]
    a = hk[0, 2]
    b = hk[0, 3]
    n = ctr[N_HEAP] - 1
    ctr[N_HEAP] = n
    if n > 0:
        lt = ht[n]
        lp = hk[n, 0]
        ls = hk[n, 1]
        la = hk[n, 2]
        lb = hk[n, 3]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            r = c + 1
            if r < n and (ht[r] < ht[c] or (ht[r] == ht[c] and (hk[r, 0] < hk[c, 0] or (
                    hk[r, 0] == hk[c, 0] and hk[r, 1] < hk[c, 1])))):
                c = r
            tc = ht[c]
            if tc < lt or (tc == lt and (hk[c, 0] < lp or (hk[c, 0] == lp and hk[c, 1] < ls))):
                ht[i] = tc
                hk[i, 0] = hk[c, 0]
                hk[i, 1] = hk[c, 1]
                hk[i, 2] = hk[c, 2]
                hk[i, 3] = hk[c, 3]
                i = c
            else:
                break
        ht[i] = lt
        hk[i, 0] = lp
        hk[i, 1] = ls
        hk[i, 2] = la
        hk[i, 3] = lb
    return t, prio, a, b


# The event handling below is `_event_loop`'s; `EventHost._run_python` is its Python twin. These
# helpers and the loops are compiled without reference counting (``_nrt=False``: they allocate nothing), as
# the counting of the many array arguments at every call cost about half the loop's throughput.

@numba.njit(cache=True, _nrt=False)
def _log_node_event(log_t, log_i, ctr, t, node, event):
    g = ctr[N_LOG]
    ctr[N_LOG] = g + 1
    log_t[g] = t
    log_i[g, 0] = node
    log_i[g, 1] = event


@numba.njit(_nrt=False)
def _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, env, cfg, log_t, log_i, ctr, t, prio, node, b):
    """A crash, leave, recover or join of `node` at time t (b: the event's flag: crash for good, recover with state).
    Counts the node down or up (a node is down while any of its crashes or leaves lasts), draws churn's next
    event, stops or restarts its clock (the epoch), calls the program's crash or recover hook and logs the change."""
    if prio == P_CRASH or prio == P_LEAVE:
        if prio == P_CRASH:
            if b == 1:
                ni[node, I_DEAD] = 1
            event = NODE_CRASH
        else:
            if ni[node, I_DEAD] == 1:
                return                                     # a dead node's churn ends
            c = ni[node, I_CHURN]
            heap_push(ht, hk, ctr, t + churn_duration(env, keys[node, K_CHURN], 2 * c + 1), P_JOIN, node, 0)
            event = NODE_LEAVE
        ni[node, I_DOWN] += 1
        if ni[node, I_DOWN] == 1:
            ni[node, I_EPOCH] += 1
            crash_fn(prog, node)
            _log_node_event(log_t, log_i, ctr, t, node, event)
    else:
        if prio == P_RECOVER:
            keep = b == 1
            event = NODE_RECOVER
        else:
            c = ni[node, I_CHURN]
            ni[node, I_CHURN] = c + 1
            heap_push(ht, hk, ctr, t + churn_duration(env, keys[node, K_CHURN], 2 * c + 2), P_LEAVE, node, 0)
            keep = cfg[C_CHURN_KEEP] == 1
            event = NODE_JOIN
        if ni[node, I_DOWN] > 0:
            ni[node, I_DOWN] -= 1
            if ni[node, I_DOWN] == 0 and ni[node, I_DEAD] == 0:
                ni[node, I_EPOCH] += 1
                k = ni[node, I_TICKS]
                ni[node, I_TICKS] = k + 1
                heap_push(ht, hk, ctr, t + next_tick(cfg, env, keys, rates, node, k), P_WAKE, node,
                           ni[node, I_EPOCH])
                recover_fn(prog, node, keep)
                _log_node_event(log_t, log_i, ctr, t, node, event)


@numba.njit(_nrt=False)
def _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk, mi, mp, free, ni, rates, keys,
                  env, cfg, rec, log_t, log_i, ctr, fc, out_dst, out_tag, out_pay, t, prio, a, b):
    """Handle the event (t, prio, a, b) just popped off the heap. Returns (ran, n_out, done, sender): whether a
    program's wake or receive ran (then its n_out messages in the out arrays are to be sent from `sender`, and `done` is its signal), or not (a stale
    tick, a delivery to a node that is down, a node event)."""
    if prio == P_WAKE:
        if b != ni[a, I_EPOCH]:
            return False, 0, False, a                      # a tick of a clock stopped by a crash
        fc[F_NOW] = t
        ctr[N_EVENTS] += 1
        k = ni[a, I_TICKS]
        ni[a, I_TICKS] = k + 1
        heap_push(ht, hk, ctr, t + next_tick(cfg, env, keys, rates, a, k), P_WAKE, a, b)
        ctr[N_WAKES] += 1
        n_out, done = wake_fn(prog, a, t, out_dst, out_tag, out_pay)
        return True, n_out, done, a
    fc[F_NOW] = t
    ctr[N_EVENTS] += 1
    if prio != P_DELIVER:
        _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, env, cfg, log_t, log_i, ctr, t, prio, a, b)
        return False, 0, False, a
    src = mi[a, 0]
    dst = mi[a, 1]
    tag = mi[a, 2]
    r = ctr[N_REC]
    ctr[N_REC] = r + 1
    rec[r, 0] = mi[a, 3]
    rec[r, 1] = src
    rec[r, 2] = dst
    if ni[dst, I_DOWN] > 0:
        rec[r, 3] = tag * 16 + mi[a, 4] * 8 + CAUSE_DEAD_RECEIVER
        free[ctr[N_FREE]] = a
        ctr[N_FREE] += 1
        return False, 0, False, dst
    rec[r, 3] = tag * 16 + mi[a, 4] * 8 + CAUSE_DELIVERED
    n_out, done = receive_fn(prog, dst, src, tag, mp[a, :widths[tag]], t, out_dst, out_tag, out_pay)
    free[ctr[N_FREE]] = a
    ctr[N_FREE] += 1
    return True, n_out, done, dst


@numba.njit(cache=True, _nrt=False)
def _send(env, cfg, keys, edge_key, adj_ptr, adj, widths, ni, rec, ctr, round_time, t, sender, d, tag):
    """Send a message of kind `tag` from `sender` to `d` at time t, in the compiled loops: check the edge, count
    it, draw its fate (`_send_fate`) and record it if it is lost. Returns (copies, latency 1, latency 2, round
    bin): copies is -1 if (sender, d) is not an edge (the pair is left in ctr[N_BAD_SRC], ctr[N_BAD_DST]),
    0 if the message is lost, else 1 or 2 copies to deliver after latency 1 and 2."""
    if not is_edge(adj_ptr, adj, sender, d):
        ctr[N_BAD_SRC] = sender
        ctr[N_BAD_DST] = d
        return -1, 0.0, 0.0, np.int64(0)
    c = ni[sender, I_SENT]
    ni[sender, I_SENT] = c + 1
    w = widths[tag]
    ctr[N_SENT] += 1
    ctr[N_SENT_SCALARS] += w
    bin_ = np.int64(t / round_time)
    copies, delayed, lat1, lat2 = send_fate(env, cfg, keys, edge_key, sender, d, c, w * 8)
    if copies == 0:
        r = ctr[N_REC]
        ctr[N_REC] = r + 1
        rec[r, 0] = bin_
        rec[r, 1] = sender
        rec[r, 2] = d
        rec[r, 3] = tag * 16 + CAUSE_LOST
        return 0, lat1, lat2, bin_
    ctr[N_DELAYED] += delayed
    return copies, lat1, lat2, bin_


@numba.njit(cache=True, _nrt=False)
def _fill_slot(ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w):
    """Put copy `copy` of a message (payload: the first w scalars of row k of `out_pay`) in a free pool slot;
    returns the slot."""
    ctr[N_FREE] -= 1
    slot = free[ctr[N_FREE]]
    mi[slot, 0] = sender
    mi[slot, 1] = d
    mi[slot, 2] = tag
    mi[slot, 3] = bin_
    mi[slot, 4] = copy
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
    return ctr[N_FREE] >= extra + 2 * max_out and ctr[N_HEAP] + extra + 2 * max_out + 2 <= ht.shape[0]


@numba.njit(cache=True, _nrt=False)
def _no_room(ctr, ht, rec, log_t, max_out):
    """ST_GROW if the pool or the heap may not hold the next event's messages, ST_FLUSH if the records or the
    log may not; -1 if there is room."""
    if not has_room(ctr, ht, 0, max_out):
        return ST_GROW
    if ctr[N_REC] + 2 * max_out + 1 > rec.shape[0] or ctr[N_LOG] + 1 > log_t.shape[0]:
        return ST_FLUSH
    return -1


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
                rates, keys, edge_key, env, cfg, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc, lim, out_dst,
                out_tag, out_pay, xi, xf, remote):
    """The gossip event loop, compiled: events of the nodes that `owner` gives to host `me`, in (time, priority,
    sequence) order, until Python is needed: a budget, an evaluation point, a full buffer, every `lim[L_YIELD]`
    events (wall-clock checks). A message to a node of this host goes on the heap; a message to another host's
    node goes to the outgoing buffer (xi, xf) with its arrival time. While draining (`lim[L_DRAIN]`) only
    deliveries are handled; `done` is then left to the engine (in ctr[N_DONE]) instead of ending the slice, and
    with `lim[L_PAUSE_DONE]` the loop hands back after every event that changed it.
    `remote` is a compile-time constant of `loop_for`: a host that owns every node compiles none of that.
    Statement for statement the same as `EventHost._run_python`, so both give the same run, but for one thing that
    changes no order: a delivery due at the current time (latency 0) waits in a lane of one instead of the heap and
    is taken when its (time, priority, sequence) comes before the heap's top, as it would have been popped; this
    spares a push to the top and a pop through every level of a heap that no longer fits the caches (12 % of a
    10^5-node Push-Sum run). The lane goes back on the heap, with its sequence number, before the loop returns."""
    max_out = out_dst.shape[0]
    round_time = env[E_ROUND_TIME]
    draining = remote and lim[L_DRAIN] != 0
    prefetching = cfg[C_N] >= PREFETCH_MIN_NODES
    since_yield = 0
    lane = -1                                          # a delivery due now: its pool slot (-1: none), time, sequence
    lane_t = 0.0
    lane_seq = 0
    status = ST_QUIESCENT
    while True:
        from_lane = lane >= 0 and before_heap_top(ht, hk, ctr, lane_t, P_DELIVER, lane_seq)
        if ctr[N_HEAP] == 0 and not from_lane:
            status = ST_QUIESCENT
            break
        t = lane_t if from_lane else ht[0]
        if not draining:
            if fc[F_NEXT_EVAL] <= t and fc[F_NEXT_EVAL] <= fc[F_MAX_TIME]:
                status = ST_EVAL_TIME
                break
            if t > fc[F_MAX_TIME]:
                status = ST_TIME
                break
        room = _no_room(ctr, ht, rec, log_t, max_out)
        if room >= 0:
            status = room
            break
        if remote and (ctr[N_OUT] + 2 * max_out > xi.shape[0] or ctr[N_OUT] >= lim[L_XBATCH]):
            status = ST_XFLUSH
            break
        if since_yield >= lim[L_YIELD]:
            status = ST_YIELD
            break
        since_yield += 1
        if from_lane:
            prio, a, b = P_DELIVER, lane, 0
            lane = -1
        else:
            t, prio, a, b = heap_pop(ht, hk, ctr)
        if prefetching and not from_lane and ctr[N_HEAP] > 0:    # the next event's node: its rows arrive meanwhile
            nxt = hk[0, 2] if hk[0, 0] != P_DELIVER else mi[hk[0, 2], 1]
            if not remote or owner[nxt] == me:
                _prefetch_node(prefetch_fn, prog, ni, keys, rates, adj_ptr, nxt)
        if draining and prio != P_DELIVER:
            continue                                       # the clocks have stopped: only deliveries remain
        ran, n_out, done, sender = _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk,
                                                 mi, mp, free, ni, rates, keys, env, cfg, rec, log_t, log_i, ctr,
                                                 fc, out_dst, out_tag, out_pay, t, prio, a, b)
        if not ran:
            continue
        for k in range(n_out if prefetching else 0):       # the receivers' rows (latency 0: their turn is next)
            if not remote or owner[out_dst[k]] == me:
                _prefetch_node(prefetch_fn, prog, ni, keys, rates, adj_ptr, out_dst[k])
        bad_edge = False
        for k in range(n_out):
            d = out_dst[k]
            tag = out_tag[k]
            copies, lat1, lat2, bin_ = _send(env, cfg, keys, edge_key, adj_ptr, adj, widths, ni, rec, ctr,
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
                    lane_seq = ctr[N_SEQ]                  # the number heap_push would have given it
                    ctr[N_SEQ] = lane_seq + 1
                elif not remote or owner[d] == me:
                    _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w, arrive)
                else:                                      # another host's node: into the outgoing buffer
                    x = ctr[N_OUT]
                    ctr[N_OUT] = x + 1
                    xi[x, X_HOST] = owner[d]
                    xi[x, X_SRC] = sender
                    xi[x, X_DST] = d
                    xi[x, X_TAG] = tag
                    xi[x, X_BIN] = bin_
                    xi[x, X_COPY] = copy
                    xf[x, 0] = arrive
                    for q in range(w):
                        xf[x, 1 + q] = out_pay[k, q]
        if bad_edge:
            status = ST_BAD_EDGE
            break
        changed = ctr[N_DONE] != (1 if done else 0)
        ctr[N_DONE] = 1 if done else 0
        if done and not remote:
            status = ST_DONE
            break
        if remote and changed and lim[L_PAUSE_DONE] != 0:
            status = ST_DONE_CHANGE                        # a time window's host: the engine notes when
            break
        if ctr[N_SENT] >= lim[L_MAX_MESSAGES]:
            status = ST_MESSAGES
            break
        if ctr[N_SENT_SCALARS] >= lim[L_MAX_SCALARS]:
            status = ST_SCALARS
            break
        if ctr[N_SENT] >= lim[L_NEXT_EVAL_MSG]:
            status = ST_EVAL_MSG
            break
    if lane >= 0:                                      # the lane back on the heap: Python sees a plain heap
        heap_insert(ht, hk, ctr, lane_t, P_DELIVER, lane_seq, lane, 0)
    return status


_LOOPS: dict[tuple, Callable] = {}


def loop_for(kernel, remote: bool) -> Callable:
    """`_event_loop` with a `GossipKernel`'s functions and `remote` (whether other hosts own nodes) bound as
    compile-time constants (direct calls that numba can inline; the in-process loop compiles no remote branch).
    Loaded from numba's cache on disk where the functions can be imported by name (`loop_cache`: a few seconds
    of compilation once, a fraction of a second after); else compiled once per process, set of functions and
    `remote` (numba cannot cache a loop that closes over functions)."""
    key = (kernel.wake, kernel.receive, kernel.crash, kernel.recover, kernel.prefetch, bool(remote))
    loop = _LOOPS.get(key)
    if loop is None:
        loop = cached_loop(sys.modules[__name__], *key)
    if loop is not None:
        _LOOPS[key] = loop
    else:
        wake, receive, crash, recover, prefetch_, remote_ = key

        @numba.njit(nogil=True)
        def loop(prog, widths, ht, hk, mi, mp, free, ni, rates, keys, edge_key, env, cfg, adj_ptr, adj, owner, me,
                 rec, log_t, log_i, ctr, fc, lim, out_dst, out_tag, out_pay, xi, xf):
            return _event_loop(wake, receive, crash, recover, prefetch_, prog, widths, ht, hk, mi, mp, free, ni,
                               rates, keys, edge_key, env, cfg, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc,
                               lim, out_dst, out_tag, out_pay, xi, xf, remote_)

        loop = _LOOPS[key] = loop
    return loop


@numba.njit(nogil=True, cache=True)
def push_arrivals(ht, hk, ctr, fc, mi, mp, free, tag, ints, times, payload):
    """Put messages that arrived from another host on the heap at max(arrival time, now); count the late ones.
    ints rows: src, dst, round bin, duplicate copy."""
    now = fc[F_NOW]
    w = payload.shape[1]
    for r in range(ints.shape[0]):
        ctr[N_FREE] -= 1
        slot = free[ctr[N_FREE]]
        mi[slot, 0] = ints[r, 0]
        mi[slot, 1] = ints[r, 1]
        mi[slot, 2] = tag
        mi[slot, 3] = ints[r, 2]
        mi[slot, 4] = ints[r, 3]
        for q in range(w):
            mp[slot, q] = payload[r, q]
        t = times[r]
        if t < now:
            ctr[N_LATE] += 1
            fc[F_LATENESS] += now - t
            t = now
        heap_push(ht, hk, ctr, t, P_DELIVER, slot, 0)


@numba.njit(cache=True)
def push_events(ht, hk, ctr, times, events):
    for i in range(times.shape[0]):
        heap_push(ht, hk, ctr, times[i], events[i, 0], events[i, 1], events[i, 2])
