"""Deterministic gossip on Ray: the host actors of a `RayGossipRun` driven in time windows (`schedule.windows`),
with checkpoints and the recovery of a lost host.

Every ``checkpoint_every`` windows the driver asks each host for a checkpoint of its state (its event loop's heap,
buffers and counters, its programs' states, its meter and fault tally: `ray_gossip_host.HostState.checkpoint`) and
keeps it, with every window request it sends each host after it. A host actor that dies (its process killed,
`ray.kill`, a lost machine) is replaced: a new actor is deployed with the host's programs and data, takes up the
last checkpoint and is handed the windows since then again (their results were routed already and are dropped), the
last being the window that failed. The same requests to the same state give the same results, and the meter comes
back with the state, so the run finishes with the ledger and model of an undisturbed run: each message is counted
once. With recovery off (``recover = False``), a lost host ends the run with one message naming it and its logical
nodes.
"""
from __future__ import annotations

import time

from ..errors import ScenarioError, SvmsimError
from ..schedule.gossip import GossipStopReason
from ..schedule.windows import run_windows
from .ray_actors import HostJournal, lost_hosts, raise_original

__all__ = ["WindowedHosts", "run_deterministic"]

_REASONS = {"time": GossipStopReason.TIME, "quiescent": GossipStopReason.QUIESCENT, "done": GossipStopReason.DONE,
            "observer": GossipStopReason.OBSERVER, "wall": GossipStopReason.WALL}
BUDGETS_REFUSED = ("deterministic gossip on Ray stops on virtual time, evaluation points and the programs' done "
                   "signal, not on a budget of messages or scalars (one host meets those at an exact message, which "
                   "hosts in time windows cannot see); allowed: [schedule] max_time or [stop] max_rounds, or "
                   "[engine] gossip = \"free\"")


class WindowedHosts:
    """The `step` and `reset` of `schedule.windows.run_windows` for the host actors of `run` (a deployed
    `RayGossipRun`), with checkpoints every `checkpoint_every` windows (None: none; a lost host then replays from
    the start) and the recovery of lost hosts (`recover`)."""

    def __init__(self, run, checkpoint_every: int | None = 100, recover: bool = True):
        if checkpoint_every is not None and int(checkpoint_every) < 1:
            raise ScenarioError(f"checkpoint_every = {checkpoint_every!r} is out of range; allowed: an integer >= 1 "
                                "(windows), or None")
        self.run = run
        self.recover = bool(recover)
        self.journal = HostJournal(len(run.handles), None if checkpoint_every is None else int(checkpoint_every))
        self.windows = 0

    def begin(self) -> None:
        self.run.gather([h.window_begin.remote() for h in self.run.handles])

    def step(self, requests: list[tuple]) -> list[dict]:
        run = self.run
        refs = [h.window.remote(*req) for h, req in zip(run.handles, requests)]
        # (without recovery nothing is replayed: no log, no checkpoint)
        due = self.journal.record(requests) if self.recover else False
        results = [self._result(ref) for ref in refs]
        for j, res in enumerate(results):
            if res is _LOST:
                results[j] = self._replace(j)
        self.windows += 1
        if due:
            self.journal.take(lambda: run.gather([h.checkpoint.remote() for h in run.handles]))
        return results

    def reset(self) -> None:
        run = self.run
        run.gather([h.window_reset.remote() for h in run.handles], timeout=5 * run.call_timeout)
        self.journal.reset()

    # -- checkpoints and recovery ------------------------------------------------------------------------------
    def _result(self, ref):
        """A window's result, or _LOST when the host died (a program's error is raised as itself)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(ref, timeout=self.run.call_timeout)
        except RayTaskError as err:
            raise_original(err)
        except RayActorError as err:
            if not self.recover:
                run = self.run
                raise lost_hosts(run.hosts, run.handles, run.groups, err) from None
            return _LOST
        except GetTimeoutError as err:
            raise SvmsimError(f"a Ray gossip host did not answer within {self.run.call_timeout:g} s (hosts "
                              f"{', '.join(self.run.hosts)})") from err

    def _replace(self, j: int) -> dict:
        """A new actor for host `j`, deployed, at its last checkpoint, with the windows since handed to it again;
        returns the result of the last (the window that failed)."""
        run, journal = self.run, self.journal
        name = list(run.hosts)[j]
        attempt = 1 + sum(1 for r in journal.recovered if r["host"] == name)
        t0 = time.perf_counter()
        new = run.replace_host(j, f"~{attempt}")
        info = run.gather([new.deploy.remote(*run.host_args[j])], timeout=5 * run.call_timeout)[0]
        if journal.checkpoints[j] is None:
            run.gather([new.window_begin.remote()])
        replayed = len(journal.logs[j])
        result = journal.rebuild(j, lambda blob: run.gather([new.restore.remote(blob)]),
                                 lambda req: run.gather([new.window.remote(*req)])[0])
        run.host_nodes[name] = info["ray_node"]
        journal.recovered.append({"host": name, "at_window": self.windows, "replayed_windows": replayed,
                                  "from_checkpoint": journal.checkpoints[j] is not None,
                                  "seconds": time.perf_counter() - t0})
        return result

    def stats(self) -> dict:
        return self.journal.stats()


_LOST = object()


def run_deterministic(run, max_time, max_messages, max_scalars, max_seconds, eval_time, on_observe, *,
                      checkpoint_every: int | None = 100, recover: bool = True) -> tuple[str, list, dict]:
    """Run the deployed `RayGossipRun` in time windows: (stop reason, each host's finished results, stats)."""
    if max_messages is not None or max_scalars is not None:
        raise ScenarioError(BUDGETS_REFUSED)
    hosts = WindowedHosts(run, checkpoint_every, recover)
    hosts.begin()

    def observe(snaps: list[dict], at: float) -> bool:
        for snap in snaps:
            snap["time"] = at
        return on_observe(*run.combine_snapshots(snaps))

    out = run_windows(hosts.step, hosts.reset, len(run.handles), run.window, max_time=max_time,
                      eval_time=eval_time, observe=observe if on_observe is not None else None,
                      max_seconds=max_seconds)
    results = run.gather([h.finish.remote(out.transit[j]) for j, h in enumerate(run.handles)])
    stats = {"mode": "deterministic", "window": run.window, "windows": out.windows, "replayed": out.replayed,
             **hosts.stats()}
    return _REASONS[out.reason], results, stats

