"""What both Ray engines share: starting Ray, placing groups on host actors, releasing actors, and re-raising
what failed inside an actor as itself."""
from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any, Callable

import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError, RaySystemError, RayTaskError

from ..errors import EngineFailure, ScenarioError
from ..program import Group

__all__ = ["ensure_ray", "colocate_groups", "placement", "release_actors", "new_namespace", "raise_original",
           "lost_hosts", "HOST_JOIN", "host_scheduling", "host_options", "this_node", "HostJournal"]

_DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2
#: folders of modules named beside scenario files that the Ray job this process started or joined carries
_JOB_FOLDERS: set[str] = set()
#: a private Ray exports live metrics every second (Ray's default is 10 s), so the dashboard keeps up with a run
METRICS_REPORT_MS = 1000


def ensure_ray(address: str | None, init_options: dict) -> bool:
    """Start a private local Ray (sized to this machine) when no `address` is given, even while another cluster
    runs on this machine or ``RAY_ADDRESS`` names one (Ray's ``address="local"``), or join the cluster at
    `address` (``"auto"``: the one Ray finds, ``HOST:PORT``); nothing when Ray is initialised here already. True
    if this call started or joined it (then its engine disconnects on close)."""
    if ray.is_initialized():
        return False
    if address is None or address == "local":
        address = "local"
        options = {"num_cpus": os.cpu_count() or 1, "include_dashboard": False,
                   "object_store_memory": _DEFAULT_OBJECT_STORE_BYTES, "log_to_driver": False,
                   "_system_config": {"metrics_report_interval_ms": METRICS_REPORT_MS}}
    else:  # joining a running cluster: its resources are not ours to size
        _check_reachable(address)
        options = {"log_to_driver": False}
    options.update(init_options)
    if "runtime_env" not in options:            # modules a scenario named beside its file, for every node
        from ..core.plugins import external_paths, ray_runtime_env

        env = ray_runtime_env()
        if env:
            options["runtime_env"] = env
            _JOB_FOLDERS.update(external_paths())
    ray.init(address=address, **options)
    return True


def _check_reachable(address: str, seconds: float = 5.0) -> None:
    """A clear error for an address where no Ray cluster answers (Ray itself retries for minutes, then raises)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"          # [::1]:6379 names an IPv6 host
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except ValueError:
        raise ScenarioError(f"engine address = {address!r} is not HOST:PORT; allowed: HOST:PORT of a Ray "
                            "cluster's head (its GCS port, 6379 by default), 'auto', or no address for a private "
                            "local Ray") from None
    except OSError as exc:
        raise ScenarioError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); allowed: the address "
                            "`ray start --head` printed, 'auto' for the cluster on this machine, or no address for a "
                            "private local Ray") from None


# -- placement: which host actor carries which groups ---------------------------------------------------------
HOST_JOIN = "+"


def host_options(n_hosts: int, soft: bool = False) -> list[dict]:
    """The ``.options`` of each of `n_hosts` host actors: where it goes (`host_scheduling`) and, when a scenario
    named a module found beside its file (`core.plugins`) that the Ray job was not started with (`ensure_ray` gives
    a Ray it starts or joins those modules for every node), a runtime environment with their folders on the actor's
    ``PYTHONPATH`` (a Ray started by the caller: this machine's workers)."""
    from ..core.plugins import external_paths, ray_runtime_env

    env = ray_runtime_env([p for p in external_paths() if p not in _JOB_FOLDERS], job=False)
    extra = {"runtime_env": env} if env else {}
    return [{"scheduling_strategy": where, **extra} for where in host_scheduling(n_hosts, soft)]


def host_scheduling(n_hosts: int, soft: bool = False) -> list:
    """Where each of `n_hosts` host actors goes: the cluster's alive nodes in turn, this process's node first
    (hard node affinity). Ray's default packs actors that ask for no CPU on the driver's node, and its "SPREAD"
    strategy is best effort (it put two hosts on one node of two now and then); a single-node Ray is unchanged.
    `soft`: another node where that one cannot take the actor (a replacement for a lost host: its node may be the
    one that was lost, still listed alive for a while)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = this_node()
    others = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here)
    order = [here] + others
    return [NodeAffinitySchedulingStrategy(node_id=order[j % len(order)], soft=soft) for j in range(n_hosts)]


def this_node() -> str:
    """The id of the Ray node this process runs on (a host actor reports where Ray placed it)."""
    return ray.get_runtime_context().get_node_id()


def colocate_groups(groups: list[Group]) -> list[Group]:
    """Move the groups of every role played by a single node into the host of the first group of the largest
    role (the role with the most nodes; the first such role in gid order on a tie).

    Only `Group.host` changes: the receiving host and the moved ones become one host named by joining their
    names with "+", the receiving host's first and the moved ones in gid order ("client-0..9+server"). How
    nodes are grouped is untouched. A no-op when no role is played by a single node; applying it twice
    changes nothing more. Returns `groups` (the same objects).
    """
    ordered = sorted(groups, key=lambda g: g.gid)
    sizes: dict[str, int] = {}
    first: dict[str, Group] = {}
    for g in ordered:
        sizes[g.role] = sizes.get(g.role, 0) + len(g.node_ids)
        first.setdefault(g.role, g)
    singles = {role for role, n in sizes.items() if n == 1}
    if not singles:
        return groups
    target = first[max(sizes, key=sizes.__getitem__)].host
    roles_on: dict[str, set[str]] = {}
    for g in ordered:
        roles_on.setdefault(g.host, set()).add(g.role)
    moving = [h for h, rs in roles_on.items() if h != target and rs <= singles]
    if not moving:
        return groups
    name = HOST_JOIN.join([target, *moving])
    merged = {target, *moving}
    for g in groups:
        if g.host in merged:
            g.host = name
    return groups


def placement(groups: list[Group]) -> dict[str, list[int]]:
    """Host actor name -> the gids it carries (ascending), hosts in order of their first gid: groups that
    share a `Group.host` share an actor."""
    hosts: dict[str, list[int]] = {}
    for g in sorted(groups, key=lambda g: g.gid):
        hosts.setdefault(g.host, []).append(g.gid)
    return hosts


def release_actors(handles, started_ray: bool) -> None:
    """Kill an engine's actors (one already gone is fine) and stop Ray if that engine started it."""
    if ray.is_initialized():
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - an actor that is already gone is fine
                pass
    if started_ray:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def lost_hosts(hosts: dict[str, list[int]], handles: list, groups: list[Group], err: BaseException,
               probe=lambda handle: handle.ping.remote(), rebuilding: bool = False) -> EngineFailure:
    """The error for a run whose host actors died: which of `hosts` (name -> gids, in the order of `handles`) no
    longer answer `probe`, the logical nodes their groups carried, and what the user can do (`rebuilding`: lost
    while the hosts were rebuilt after an earlier loss, which recovery does not retry)."""
    names = []
    for name, handle in zip(hosts, handles):
        try:
            ray.get(probe(handle), timeout=10)
        except (RayActorError, GetTimeoutError, ActorUnschedulableError):
            names.append(name)
    names = names or list(hosts)
    by_gid = {g.gid: g for g in groups}
    nodes = sorted(int(n) for name in names for gid in hosts[name] for n in by_gid[gid].node_ids)
    return EngineFailure(f"Ray host actor{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)} died "
                         f"({type(err).__name__}), carrying logical nodes {_id_ranges(nodes)}; the run cannot go on "
                         + ("without their state (lost while the hosts were rebuilt after an earlier loss); allowed: "
                            "run again, or engine inproc" if rebuilding else
                            "without their state; allowed: run again (engine actors are not restarted), or engine "
                            "inproc"), hosts=tuple(names), node_ids=tuple(nodes))


def _id_ranges(ids: list[int]) -> str:
    """Sorted ids as runs: [0, 1, 2, 5] -> '0-2, 5'."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def new_namespace() -> str:
    return f"svmsim-{uuid.uuid4().hex[:8]}"


def _original_error(err: BaseException) -> BaseException:
    """The exception raised inside an actor (by a node program, or while unpickling its arguments) if Ray
    carried it over; else `err` itself."""
    cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
    if isinstance(cause, RaySystemError) and isinstance(getattr(cause, "client_exc", None), BaseException):
        cause = cause.client_exc
    return cause if isinstance(cause, BaseException) else err


def raise_original(err: RayTaskError):
    """Re-raise what failed inside a host actor as itself (type, message, and the host's note naming it)."""
    original = _original_error(err)
    if original is err:
        raise err
    if isinstance(original, ModuleNotFoundError) and hasattr(original, "add_note"):
        original.add_note("Ray's workers cannot import a module that the node programs need: install it (e.g. "
                          "`pip install -e .`), put it on PYTHONPATH, or ship it by value with "
                          "ray.cloudpickle.register_pickle_by_value(module)")
    raise original from err


# -- what the driver keeps to rebuild a host actor that died ---------------------------------------------------------
#: checkpoints take at most about this share of a run's time (`HostJournal`)
MAX_CHECKPOINT_SHARE = 0.05
#: a checkpoint is due, whatever the calls and the time, once the requests logged since the last hold this many bytes
MAX_LOGGED_BYTES = 256 * 2**20


class HostJournal:
    """Each host's last checkpoint (bytes from the host; None before the first) and every request that changed its
    state since, in order: a host actor that dies is replaced by a new one deployed with the same programs and
    data, which takes up the checkpoint and is handed the requests again. Both Ray engines keep one (synchronous
    rounds: a round's inboxes; deterministic gossip: a window's requests).

    every: calls between checkpoints (None: no checkpoint; a lost host then replays from the start).
    max_share: a checkpoint waits past `every` calls until the time since the last one ended is at least the last
        one's duration / max_share (default `MAX_CHECKPOINT_SHARE`), so that checkpoints take at most about this
        share of a run whatever the size of the hosts' states (a host's data in its state is copied by every
        checkpoint). Whatever `every` and the time, a checkpoint is due once the requests logged since hold `MAX_LOGGED_BYTES` (bytes requests),
        so that the log of a run with large messages stays bounded.
    clock: seconds (`time.perf_counter`; a test passes its own).
    """

    def __init__(self, n_hosts: int, every: int | None, max_share: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.every = every
        self.max_share = float(MAX_CHECKPOINT_SHARE if max_share is None else max_share)
        self.clock = clock
        self._last_end = clock()
        self._last_seconds = 0.0
        self.checkpoints: list[bytes | None] = [None] * n_hosts
        self.logs: list[list] = [[] for _ in range(n_hosts)]
        self.calls = 0
        self.since = 0            # calls since the last checkpoint (since the start before the first)
        self.logged_bytes = 0     # size of the bytes requests logged since
        self.taken = 0
        self.seconds = 0.0
        self.bytes = 0
        self.recovered: list[dict] = []

    def record(self, requests) -> bool:
        """Log one call's requests, ``{host: request}`` or one per host in order; True when a checkpoint is due
        after it."""
        for j, req in (requests.items() if isinstance(requests, dict) else enumerate(requests)):
            self.logs[j].append(req)
            if isinstance(req, bytes):
                self.logged_bytes += len(req)
        self.calls += 1
        self.since += 1
        if self.logged_bytes >= MAX_LOGGED_BYTES:
            return True
        return (self.every is not None and self.since >= self.every
                and (self.clock() - self._last_end) * self.max_share >= self._last_seconds)

    def take(self, get_blobs: Callable[[], list[bytes]]) -> None:
        """A checkpoint of every host (`get_blobs` asks them, in host order); the logs start again."""
        t0 = self.clock()
        self.checkpoints = list(get_blobs())
        self.logs = [[] for _ in self.logs]
        self.since = self.logged_bytes = 0
        self._last_end = self.clock()
        self._last_seconds = self._last_end - t0
        self.seconds += self._last_seconds
        self.bytes = sum(len(b) for b in self.checkpoints)
        self.taken += 1

    def reset(self) -> None:
        """Back to the start of the run: no checkpoint, nothing logged."""
        self.checkpoints = [None] * len(self.checkpoints)
        self.logs = [[] for _ in self.logs]
        self.since = self.logged_bytes = 0

    def rebuild(self, j: int, restore: Callable[[bytes], Any], replay: Callable[[Any], Any]):
        """Host `j`'s state back at the last call: `restore` its checkpoint (when there is one), then `replay` each
        logged request in order; returns what `replay` returned last (None when nothing was logged)."""
        if self.checkpoints[j] is not None:
            restore(self.checkpoints[j])
        result = None
        for req in self.logs[j]:
            result = replay(req)
        return result

    def stats(self) -> dict:
        return {"checkpoint_every": self.every, "checkpoints": self.taken, "checkpoint_s": self.seconds,
                "checkpoint_bytes": self.bytes, "recovered": self.recovered}
