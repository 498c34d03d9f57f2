"""Synchronous rounds.

In round r every group that has mail (or asked to be woken, or is an initiator in round 0) is stepped once;
what it sends in round r is metered in round r and delivered in round r+1. The scheduler owns routing and the
meter, so every engine yields the same ledger.

Programs report progress through `Outbox.signals`:
  ``{"iteration": t}``  iteration t is complete once this round's messages are delivered;
  ``{"wake": True}``    step this group next round even with an empty inbox;
  ``{"done": True}``    the algorithm has finished (e.g. a fixed iteration count was reached);
  ``{"counts": {q: amounts}}``  work of node quantity q (e.g. ``"kernel_evaluations"``) the group's members did in
                        this step, one amount per member in member order: metered per node and round.
At an iteration boundary that the observer wants to look at, the scheduler first runs a *settle* round that
steps only groups with mail (so receivers apply the messages that close the iteration), then calls the observer;
woken groups run in the round after.

When the engine lends its groups' compiled steps (`Engine.kernels`: the in-process engine, for programs that
offer a `SyncKernel`), the meter knows the topology and there is no fault model or message log, the rounds can run
in the compiled loop of `compiled_sync` instead (any number of groups and nodes), with the same rules, the same
ledger and the same states, and with compression the same encodings (built-in codecs, error feedback but ef21);
rounds whose programs have no kernel (e.g. a set-up phase) run here.
Compiling that loop for a program takes seconds to a minute in the first process that runs it (later ones load it
from disk: `loop_cache`), so by default (``compiled=None``) a run switches to it only after its rounds have taken
`COMPILE_AFTER_SECONDS` here (numba's compilation of the programs' own steps left out): a short run never pays for
the compilation, a long one pays at most about twice what the better choice would have cost (the ski-rental rule).
A loop compiled already (in this process, or in numba's cache on disk) costs a load, so the run switches to it at
once. ``compiled=True`` switches at once, ``compiled=False`` never.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..comm.message import Inbox, MessageBatch, is_shared_ids, merge_batches
from ..comm.meter import Meter
from ..errors import ProtocolError
from ..program import Group, kernel_dtypes

__all__ = ["SyncScheduler", "StopReason", "COMPILE_AFTER_SECONDS", "READY_CHECKS"]

#: by default, rounds move to a compiled loop that is not compiled yet once the Python rounds have run this long,
#: compilation left out (about what compiling a loop takes: 17-110 s measured on a 2-core machine, less on a quiet one)
COMPILE_AFTER_SECONDS = 20.0
#: the first Python rounds ask whether the compiled loop is compiled already until the programs offer their kernels
#: (after a set-up phase); programs that never do are not asked again after this many rounds
READY_CHECKS = 16


def _unhosted(batch: MessageBatch, i: int) -> ProtocolError:
    from .compiled_sync import unhosted_error
    return unhosted_error(batch.tag, int(batch.src[i]), int(batch.dst[i]))


class StopReason:
    ITERATIONS = "iteration budget"
    ROUNDS = "round budget"
    COMMUNICATION = "communication budget"
    OBSERVER = "stopping rule"
    DONE = "algorithm finished"
    QUIESCENT = "no messages in flight"


class SyncScheduler:
    """Drives synchronous rounds over an engine's groups.

    Parameters
    ----------
    engine, groups, meter: the deployed engine (an `engine.base.Engine`: its ``step``, ``kernels``), its groups,
        and the meter every message crosses.
    n_nodes: number of logical nodes (for routing).
    observe_every: call `on_iteration` every this many completed iterations (and at the last one).
    faults: optional fault model with ``apply(round_, batch) -> (delivered, dropped)``; dropped messages are
        metered as dropped and not delivered.
    compression: optional `comm.compression.Compressor`: every batch a program sends is encoded by it first (then
        the fault model, the meter and the receivers see the encoding).
    """

    def __init__(self, engine, groups: list[Group], meter: Meter, n_nodes: int, faults=None,
                 compiled: bool | None = None, clock=None, compression=None):
        self.engine = engine
        self.groups = groups
        self.meter = meter
        self.faults = faults
        self.compression = compression
        # pragma: no mutate start (equivalent: -1's own dtype is int64; any negative id marks a node no group hosts)
        self.node_group = np.full(n_nodes, -1, dtype=np.int64)
        # pragma: no mutate end
        for g in groups:
            self.node_group[g.node_ids] = g.gid
        self.round = 0
        self.iteration = 0
        # messages in flight (gid -> Inbox) and groups to wake, kept between calls so that `run` can resume
        self._mail: dict[int, Inbox] = {}
        self._pending: dict[tuple[int, str], list[MessageBatch]] = {}   # several batches for one (gid, tag)
        self._wake: set[int] = {g.gid for g in groups if g.program.initiator}
        self._route_cache: dict[int, tuple] = {}
        self.clock = clock                    # a `cluster_time.ClusterClock`: modelled time, round by round
        # the compiled loop: allowed unless compiled=False; used when every group offers a kernel
        # (modelled time runs in it too, unless each step's compute time is measured in Python)
        ef21 = compression is not None and compression.spec.uses_ef21
        self._compiled_allowed = (compiled is not False and faults is None and not ef21
                                  and (clock is None or clock.model.compute != "measured")
                                  and meter.compiled_view() is not None)
        #: why the rounds stay in Python although compiled steps may be offered (None: they need not)
        self.python_only = ("faults: the compiled loop applies no fault model" if faults is not None else
                            "compression: error feedback 'ef21' checks that a broadcast's receivers stay the same, "
                            "which the compiled loop does not" if ef21 else None)
        self._codec_plans = None      # the compiled loop's encoding of the kernels' tags (with compression)
        self._compile_now = compiled is True
        self._python_clock = None     # a compile_clock.Stopwatch from this scheduler's first Python round
        self._ready_checks = READY_CHECKS   # Python rounds left in which to ask whether the loop is compiled
        self._compiled_mail = None

    def _post(self, gid: int, batch: MessageBatch) -> None:
        inbox = self._mail.get(gid)
        if inbox is None:
            inbox = self._mail[gid] = Inbox()
        tag = batch.tag
        prev = inbox.get(tag)
        if prev is None:
            inbox[tag] = batch
        else:
            key = (gid, tag)
            lst = self._pending.get(key)
            if lst is None:
                self._pending[key] = [prev, batch]
            else:
                lst.append(batch)

    def _route(self, batch: MessageBatch) -> None:
        """Post `batch` to the groups hosting its receivers. The group of a shared id array (`is_shared_ids`) whose
        receivers all live in one group is cached (the entry holds the array, so its id is not reused while
        cached): a hit saves the lookup and never changes the route."""
        dst = batch.dst
        # pragma: no mutate start (equivalent: without the cache the route is looked up again, to the same group)
        shared = is_shared_ids(dst)
        hit = self._route_cache.get(id(dst)) if shared else None
        # pragma: no mutate end
        if hit is not None:
            self._post(hit[1], batch)
            return
        gids = self.node_group[dst]
        g0 = int(gids[0])
        # pragma: no mutate start (equivalent: the split below posts one group's selection of the whole batch alike)
        single = gids.shape[0] == 1 or bool((gids == g0).all())
        # pragma: no mutate end
        if single:
            if g0 < 0:
                raise _unhosted(batch, 0)
            if shared:
                if len(self._route_cache) > 4096:  # pragma: no mutate (equivalent: only bounds the cache's size)
                    self._route_cache.clear()
                self._route_cache[id(dst)] = (dst, g0)  # pragma: no mutate (equivalent: no entry, the lookup again)
            self._post(g0, batch)
            return
        hosts = np.unique(gids)
        if hosts[0] < 0:
            raise _unhosted(batch, int(np.argmax(gids < 0)))
        for g in hosts:
            self._post(int(g), batch.select(gids == g))

    def _deliver(self, outboxes: dict, round_: int) -> tuple[int | None, bool]:
        """Meter and route one round's outboxes; return (completed iteration or None, done flag)."""
        completed = None
        done = False  # pragma: no mutate (equivalent: None reads as False)
        record = self.meter.record
        faults = self.faults
        encode = self.compression.apply if self.compression is not None else None
        timed = [] if self.clock is not None else None
        # pragma: no mutate start (equivalent: the order of groups changes no result; inboxes merge by (src, dst))
        for gid in (sorted(outboxes) if len(outboxes) > 1 else outboxes):
            # pragma: no mutate end
            out = outboxes[gid]
            for batch in out.batches:
                if encode is not None:                  # the sender encodes; the network loses the encoding
                    batch = encode(batch)
                if faults is not None:
                    batch, dropped = faults.apply(round_, batch)
                    if dropped is not None and dropped.n_messages:
                        self.meter.record_dropped(round_, dropped)  # pragma: no mutate (equivalent: by tag and edge)
                    if batch.n_messages == 0:
                        continue
                record(round_, batch)
                self._route(batch)
                if timed is not None:
                    timed.append(batch)
            sig = out.signals
            if sig:
                if "iteration" in sig:
                    completed = int(sig["iteration"])
                if sig.get("wake"):
                    self._wake.add(gid)
                if sig.get("done"):
                    done = True
                counts = sig.get("counts")
                if counts:
                    ids = self.groups[gid].node_ids
                    for q, amounts in counts.items():
                        self.meter.record_node(round_, q, ids, amounts)
        if timed is not None:
            self._advance_clock(outboxes, timed)
        return completed, done

    def _advance_clock(self, outboxes: dict, batches: list[MessageBatch]) -> None:
        stepped = [self.groups[g].node_ids for g in outboxes]
        if self.clock.model.compute == "measured":    # each group's step, timed by the engine, shared evenly (the
            timed = self.engine.step_seconds            # runner runs measured time on a timed in-process engine)
            seconds = [np.full(len(ids), timed[g] / len(ids)) for g, ids in zip(outboxes, stepped)]
        else:
            rates = self.clock.rates                  # each node's own (a heterogeneous cluster's differ)
            work = [np.asarray((outboxes[g].signals or {}).get("work", np.zeros(len(ids))))
                    for g, ids in zip(outboxes, stepped)]
            for g, ids, w in zip(outboxes, stepped, work):
                if w.shape != (len(ids),):
                    raise ProtocolError(f"group {g} declared work of shape {w.shape} for its {len(ids)} nodes; "
                                        "allowed: one number of operations per node, in member order")
            overhead = self.clock.model.step_overhead   # each step's fixed cost (0 unless the table sets it)
            seconds = [w / rates[np.asarray(ids, np.int64)] + overhead for w, ids in zip(work, stepped)]

        def cat(xs: list) -> np.ndarray:
            return np.concatenate(xs) if xs else np.zeros(0)  # pragma: no mutate (equivalent: advance skips empties)

        self.clock.advance(
            cat(stepped).astype(np.int64),  # pragma: no mutate (equivalent: advance casts the ids to int64 itself)
            cat(seconds), cat([b.src for b in batches]).astype(np.int64),
            cat([b.dst for b in batches]).astype(np.int64),  # pragma: no mutate (equivalent: ids search alike)
            cat([np.full(b.n_messages, float(b.bytes_per_message)) for b in batches]))

    def _take_mail(self) -> dict[int, Inbox]:
        """This round's inboxes (rows of merged batches ordered by (src, dst)); clears the mailbox."""
        mail = self._mail
        if self._pending:
            for (gid, tag), batches in self._pending.items():
                mail[gid][tag] = merge_batches(batches)
            self._pending = {}
        self._mail = {}
        if len(mail) > 1:  # pragma: no mutate (equivalent in one process: the groups' steps are independent)
            mail = {g: mail[g] for g in sorted(mail)}
        return mail

    def run(self, *, max_iterations: int | None = None, max_rounds: int | None = None,
            max_scalars: int | None = None, observe_every: int = 0,
            on_iteration: Callable[[int, int], bool] | None = None,
            on_round: Callable[[int], None] | None = None) -> str:
        """Run until a budget is met, the observer says stop, or no message is in flight.

        `on_iteration(iteration, round)` is called at observed iteration boundaries after the settle round and
        returns True to stop. Returns the reason the run stopped. A later call resumes where this one stopped.
        """
        empty = Inbox()
        meter = self.meter
        step = self.engine.step
        if self.round == 0 and not self._wake and not self._mail:
            raise ProtocolError(self._no_start())
        while True:
            if self._compiled_allowed and self._compiled_due():
                kernels = self.engine.kernels()
                if kernels is not None:
                    reason = self._run_compiled(kernels, max_iterations, max_rounds, max_scalars, observe_every,
                                                on_iteration, on_round)
                    if reason is not None:
                        return reason
                    continue
            if max_rounds is not None and self.round >= max_rounds and (self._mail or self._wake):
                return StopReason.ROUNDS
            inboxes = self._take_mail()
            if self._wake:
                for gid in self._wake:
                    if gid not in inboxes:
                        inboxes[gid] = empty
                self._wake = set()
            if not inboxes:
                return StopReason.QUIESCENT
            completed, done = self._deliver(step(self.round, inboxes), self.round)
            self.round += 1
            if on_round is not None:
                on_round(self.round)
            if max_scalars is not None and meter.scalars >= max_scalars:
                return StopReason.COMMUNICATION
            if completed is None:
                if done:
                    return StopReason.DONE
                continue
            self.iteration = completed
            meter.mark_iteration(completed, self.round - 1)
            last = (max_iterations is not None and completed >= max_iterations) or done
            due = on_iteration is not None and bool(observe_every) and completed % observe_every == 0
            if due or last:
                self._settle()
            reason = self._after_boundary(completed, done, due or last, max_iterations, on_iteration)
            if reason is not None:
                return reason

    def _no_start(self) -> str:
        roles = sorted({g.role for g in self.groups})
        return (f"no program starts the run: in round 0 only programs with initiator = True are stepped, and none "
                f"of the roles ({', '.join(roles)}) has one; allowed: initiator = True on the program that sends "
                "first (a class attribute of its NodeProgram)")

    def in_flight(self) -> tuple[int, int]:
        """(messages, scalars) sent and metered but not delivered yet: what the next round would deliver (at the
        end of a run: what the last round sent, e.g. a settle round's replies)."""
        messages = scalars = 0
        for gid, inbox in self._mail.items():
            for tag, batch in inbox.items():
                for b in self._pending.get((gid, tag), [batch]):
                    messages += b.n_messages
                    scalars += b.n_messages * b.scalars_per_message
        return messages, scalars

    def _compiled_due(self) -> bool:
        """Whether the rounds move to the compiled loop now: at once when it is compiled already (in this process or
        in numba's cache on disk: `compiled_sync.loop_ready`, asked at the first Python round), else once the
        Python rounds have taken COMPILE_AFTER_SECONDS, numba's compilation in them left out (the first rounds
        compile or load the programs' own steps: that is not time the compiled loop would save)."""
        if self._compile_now:
            return True
        if self._python_clock is None:
            from ..core.compile_clock import Stopwatch

            self._python_clock = Stopwatch()
        if self._ready_checks > 0:               # the first rounds may be a set-up phase without kernels
            self._ready_checks -= 1
            kernels = self.engine.kernels()
            if kernels is not None:
                from .compiled_sync import kernels_compatible, loop_ready

                self._ready_checks = 0
                if kernels_compatible(kernels) and loop_ready(kernels, self.compression is not None):
                    self._compile_now = True
                    return True
        return self._python_clock.wall() >= COMPILE_AFTER_SECONDS  # pragma: no mutate (equivalent: > at a tie)

    def _after_boundary(self, completed, done, observed, max_iterations, on_iteration) -> str | None:
        """After iteration `completed` ended (and was settled if `observed`): the observer, then the ends."""
        if observed and on_iteration is not None and on_iteration(completed, self.round):
            return StopReason.OBSERVER
        if done:
            return StopReason.DONE
        if max_iterations is not None and completed >= max_iterations:
            return StopReason.ITERATIONS
        return None

    def _run_compiled(self, kernels, max_iterations, max_rounds, max_scalars, observe_every, on_iteration,
                      on_round) -> str | None:
        """One call of the compiled loop from the current mail; None means carry on (in either loop)."""
        from . import compiled_sync as C

        tags, widths = kernels[0].tags, kernels[0].widths
        if not C.kernels_compatible(kernels) or (self.clock is not None
                                                 and not all(C.work_readable(k) for k in kernels)):
            self._compiled_allowed = False  # pragma: no mutate (equivalent: the Python loop runs them either way)
            return None
        if self.compression is not None and self._codec_plans is None:
            self._codec_plans, why = self.compression.compiled_plans(tags, widths, kernel_dtypes(kernels[0]))
            if self._codec_plans is None:
                self._compiled_allowed = False
                self.python_only = f"compression: {why}"
                return None
        if self._compiled_mail is None:
            capacity = sum(k.max_out for k in kernels)
            width = int(np.max(widths))
            self._compiled_mail = (C.CompiledMail(len(self.groups), capacity, width),
                                   C.CompiledMail(len(self.groups), capacity, width))
        mail, scratch = self._compiled_mail
        mail.from_inboxes(self._take_mail(), self._wake, {t: i for i, t in enumerate(tags)})
        # pragma: no mutate start (equivalent: without an observer, handing back at its points changes nothing)
        observed = observe_every if on_iteration is not None else 0
        # pragma: no mutate end
        status, self.round, completed, done = C.run_compiled_rounds(
            kernels, mail, scratch, self.node_group, self.meter, round_=self.round, iteration=self.iteration,
            max_rounds=max_rounds, max_scalars=max_scalars, max_iterations=max_iterations, observe_every=observed,
            clock=self.clock, group_nodes=[g.node_ids for g in self.groups], compression=self.compression,
            codec_plans=self._codec_plans, on_failure=self._failed_in)
        # pragma: no mutate start (equivalent: receivers read payloads as float64, exact for every wire dtype)
        self._mail, self._wake = mail.to_inboxes(tags, widths, kernel_dtypes(kernels[0]))
        # pragma: no mutate end
        self.iteration = completed
        if on_round is not None:
            on_round(self.round)
        if status == C.ROUNDS:
            return StopReason.ROUNDS
        if status == C.QUIESCENT:
            return StopReason.QUIESCENT
        if status == C.COMMUNICATION:
            return StopReason.COMMUNICATION
        if status == C.DONE:
            return StopReason.DONE
        if status == C.BOUNDARY:
            return self._after_boundary(completed, done, True, max_iterations, on_iteration)
        return None            # PAUSE / FLUSH: ask the programs again and go on

    def _failed_in(self, round_: int) -> None:
        """A step of the compiled loop raised in round `round_`: the run's round is that one, as in Python."""
        self.round = round_

    def _settle(self) -> None:
        """Step only the groups with mail, so that the iteration's closing messages are applied."""
        if not self._mail:
            return
        inboxes = self._take_mail()
        self._deliver(self.engine.step(self.round, inboxes), self.round)
        self.round += 1
