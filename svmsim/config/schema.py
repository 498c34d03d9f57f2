"""The scenario: ``[schedule]`` and ``[faults]``, which depend on the algorithm's scheduler, and `Scenario`,
the whole experiment (its tables and their cross-checks).
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from svmsim.errors import ScenarioError

from .lower import (CLOCKS, ENGINE_KINDS, FAULT_KEYS, Distribution, FaultModel, fault_kind, fault_kinds, is_registered,
                    metric, resolve_fault_params)
from .compression import CompressionSection
from .messages import choice, fail, issue, several
from .sections import (MAX_COUNT, AlgorithmSection, DataSection, EngineSection, NetworkSection, OutputSection, PartitionSection,
                       SectionModel, StopSection, TopologySection, allowed_text)
from .values import SECTIONS, dump_toml, plain, show


_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_NAME_ALLOWED = "letters, digits, '_', '.' and '-' (at least one character, no spaces)"
_GOSSIP_MODE = ("engine", "gossip")       # where the deterministic mode's refusals point

#: schedulers: "auto" takes the algorithm's own (its Params' ``scheduler`` class attribute, else "sync")
SCHEDULERS = ("auto", "sync", "gossip")

#: [schedule] keys that only the gossip scheduler uses
GOSSIP_SCHEDULE_KEYS = ("clock", "rate", "jitter", "latency", "bandwidth", "edge_spread", "round_time", "eval_time",
                        "eval_messages", "max_time", "max_messages")


class ScheduleSection(SectionModel):
    """``[schedule]``: synchronous rounds or asynchronous gossip, and gossip's virtual-time model.

    ``kind = "auto"`` (the default) takes the algorithm's scheduler: gossip for peer algorithms (pushsum, gadget),
    synchronous rounds for server-client ones. Gossip keys (see `svmsim.schedule.gossip`): every node's clock
    (``clock`` poisson | periodic, ``rate`` ticks per unit of virtual time, ``jitter`` for periodic clocks); a
    message's ``latency`` (a number, or a table ``{kind = "constant" | "uniform" | "exponential" | "lognormal",
    ...}``), ``edge_spread`` (sigma of a fixed log-normal factor per edge) and ``bandwidth`` (adds bytes/bandwidth);
    ``round_time``, the virtual time of one ledger round and one metrics ``iteration`` (default 1/rate); evaluation
    every ``eval_time`` of virtual time (default round_time) or every ``eval_messages`` messages; the budgets
    ``max_time`` (virtual time) and ``max_messages`` (beside [stop]'s: max_rounds and max_iterations count rounds
    of virtual time). ``compiled = false`` forces the Python loop of either scheduler (same results, slower): the
    gossip event loop, or the synchronous rounds of programs that offer a compiled step (in-process engine; by
    default those move to the compiled loop once a run has spent a few seconds in Python rounds).
    """

    kind: str = Field("auto", description="the scheduler: 'auto' (the algorithm's own), 'sync' (synchronous "
                                          "rounds) or 'gossip' (asynchronous gossip on virtual time)")
    clock: str = Field("poisson", description="gossip: every node's clock, 'poisson' (exponential gaps between "
                                              "ticks) or 'periodic'")
    rate: float = Field(1.0, gt=0, description="gossip: clock ticks per unit of virtual time")
    jitter: float = Field(0.0, ge=0, lt=1, description="gossip, periodic clock: each tick's period is scaled by a "
                                                       "factor drawn uniformly from [1 - jitter, 1 + jitter]")
    latency: Any = Field(0.01, validate_default=True, description="gossip: the latency of a message in virtual "
                                                                  "time, a number or a distribution",
                         json_schema_extra=allowed_text(
        "a number >= 0, or a table {kind = ..., ...} with kind constant (value), uniform (low, high), exponential "
        "(mean) or lognormal (median, sigma)"))
    bandwidth: float | None = Field(None, gt=0, description="gossip: bytes per unit of virtual time; a message's "
                                                           "latency grows by its bytes / bandwidth (default: no "
                                                           "such term)")
    edge_spread: float = Field(0.0, ge=0, description="gossip: sigma of a fixed log-normal latency factor per edge "
                                                      "(0: every edge alike)")
    round_time: float | None = Field(None, gt=0, description="gossip: the virtual time of one ledger round and one "
                                                            "metrics iteration (default: 1/rate)")
    eval_time: float | None = Field(None, gt=0, description="gossip: virtual time between evaluation points "
                                                           "(default: round_time)")
    eval_messages: int | None = Field(None, ge=1, description="gossip: evaluate every this many messages instead "
                                                             "(in-process engine)")
    max_time: float | None = Field(None, gt=0, description="gossip: stop at this virtual time")
    max_messages: int | None = Field(None, ge=1, le=MAX_COUNT, description="gossip: stop after this many messages")
    compiled: bool = Field(True, description="false forces the Python loop of either scheduler (same results, "
                                             "slower)")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise choice("kind", value, "a scheduler", SCHEDULERS)
        return value

    @field_validator("clock")
    @classmethod
    def _known_clock(cls, value: str) -> str:
        if value not in CLOCKS:
            raise choice("clock", value, "a clock", CLOCKS)
        return value

    @field_validator("latency", mode="before")
    @classmethod
    def _latency_distribution(cls, value: Any) -> dict:
        try:
            return Distribution.from_config(value, "latency").to_config()
        except ScenarioError as exc:
            raise fail(str(exc), ("schedule", "latency")) from None

    @model_validator(mode="after")
    def _clock_keys(self) -> "ScheduleSection":
        if self.jitter and self.clock != "periodic":
            raise fail(f"jitter = {show(self.jitter)} applies to the periodic clock only; allowed: "
                        "clock = \"periodic\", or jitter = 0", ("schedule", "jitter"))
        return self

    def gossip_keys_given(self) -> list[str]:
        """The gossip-only keys that the file sets."""
        return [k for k in GOSSIP_SCHEDULE_KEYS if k in self.model_fields_set]

    def latency_distribution(self) -> Distribution:
        return Distribution.from_config(self.latency, "latency")

    @property
    def effective_round_time(self) -> float:
        """Virtual time per ledger round / metrics iteration."""
        return self.round_time if self.round_time is not None else 1.0 / self.rate


class FaultsSection(SectionModel):
    """``[faults]``: what goes wrong; by default nothing (see `svmsim.faults` for what each key does).

    drop, duplicate: per-message probabilities in [0, 1); delay with delay_time: probability and distribution of
    an extra delay; crash (a fraction) or crash_nodes (a list), crash_time, recover_time, recover_state; stragglers
    or straggler_nodes with straggler_factor; churn_rate, churn_downtime, churn_state; seed (default: the scenario's).
    A fault kind (`svmsim list faults`: built in, or a plugin's through the entry-point group ``svmsim.faults``) is a
    table of its own, ``[faults.<kind>]``, or an array of tables ``[[faults.<kind>]]`` for several.
    """

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    drop: float = Field(0.0, ge=0, lt=1, description="the probability that a message is lost in the network "
                                                     "(metered as dropped)")
    duplicate: float = Field(0.0, ge=0, lt=1, description="the probability that a message that is not lost is "
                                                          "delivered twice (both copies metered)")
    delay: float = Field(0.0, ge=0, le=1, description="the probability that a message copy gets an extra delay "
                                                      "drawn from delay_time (gossip only)")
    delay_time: Any = Field(None, description="the distribution of the extra delay", json_schema_extra=allowed_text(
        "a number >= 0, or a table {kind = ..., ...} with kind constant, uniform, exponential or lognormal"))
    crash: float = Field(0.0, ge=0, le=1, description="the fraction of the nodes (chosen by the fault seed) that go "
                                                      "down at crash_time")
    crash_nodes: list[int] = Field(default_factory=list, description="the nodes that go down at crash_time "
                                                                     "(instead of a fraction)")
    crash_time: float = Field(0.0, ge=0, description="when the crashed nodes go down (virtual time; synchronous "
                                                     "rounds: the round index)")
    recover_time: float | None = Field(None, gt=0, description="when the crashed nodes come back (default: never)")
    recover_state: bool = Field(True, description="crashed nodes come back with their state (false: restarted from "
                                                  "their initial state; gossip only)")
    stragglers: float = Field(0.0, ge=0, le=1, description="the fraction of the nodes whose clocks run "
                                                           "straggler_factor times slower (gossip only)")
    straggler_nodes: list[int] = Field(default_factory=list, description="the straggling nodes (instead of a "
                                                                         "fraction; gossip only)")
    straggler_factor: float = Field(4.0, ge=1, description="how many times slower a straggler's clock runs")
    churn_rate: float = Field(0.0, ge=0, description="every node leaves after an exponential up-time of mean "
                                                     "1/churn_rate (0: no churn)")
    churn_downtime: float = Field(1.0, gt=0, description="the mean of the exponential time a leaving node stays "
                                                         "away")
    churn_state: bool = Field(True, description="a node rejoins with its state (false: restarted from its initial "
                                                "state; gossip only)")
    seed: int | None = Field(None, ge=0, description="the seed of the fault model's random choices (default: the "
                                                     "scenario's seed)")

    @field_validator("delay_time", mode="before")
    @classmethod
    def _delay_distribution(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return Distribution.from_config(value, "delay_time").to_config()
        except ScenarioError as exc:
            raise fail(str(exc), ("faults", "delay_time")) from None

    @model_validator(mode="after")
    def _fault_kinds(self) -> "FaultsSection":
        """Every key beyond the fixed ones is a fault kind's table (or array of tables) with valid parameters."""
        errors = []
        for key, value in (self.model_extra or {}).items():
            if fault_kind(key) is None:
                errors.append(issue(("faults", key), f"unknown key '{key}'; allowed keys: "
                                    f"{', '.join(type(self).model_fields)}, or a fault kind's table: "
                                    f"{', '.join(fault_kinds())}"))
                continue
            for table in (value if isinstance(value, list) else [value]):
                try:
                    resolve_fault_params(key, table)
                except ScenarioError as exc:
                    errors.append(issue(("faults", key), str(exc)))
        if errors:
            raise several(errors)
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "FaultsSection":
        try:
            self.model()
        except ScenarioError as exc:
            text = str(exc)
            key = next((k for k in (*FAULT_KEYS, *(self.model_extra or {}))
                        if text.startswith((f"faults.{k} ", f"faults.{k}:")) or f"'faults.{k}'" in text), None)
            raise fail(text.removeprefix("faults."), ("faults", key) if key else ("faults",)) from None
        return self

    def model(self) -> FaultModel:
        """The fault model these settings describe."""
        return FaultModel.from_config(self.model_dump())

    @property
    def is_empty(self) -> bool:
        return self.model().is_empty


def _optional_section() -> Any:
    """An optional table: when it is left out, its defaults are validated like a given table."""
    return Field(default_factory=dict, validate_default=True)


class Scenario(SectionModel):
    """A validated scenario: the whole experiment.

    ``scenario.algorithm.params.<key>`` reads an algorithm parameter, ``scenario.topology.params`` holds the
    resolved topology parameters, and :meth:`to_dict` returns the fully resolved plain dict (defaults filled
    in), suitable for :func:`dump_toml` or ``json.dumps``.
    """

    name: str = Field(description="the scenario's name: run directories are named after it")
    description: str = Field("", description="free text saying what the experiment is")
    seed: int = Field(0, ge=0, description="the seed of every random choice of the run (data, partition, topology, "
                                           "algorithm, faults)")
    data: DataSection
    partition: PartitionSection = _optional_section()
    topology: TopologySection = _optional_section()
    engine: EngineSection = _optional_section()
    algorithm: AlgorithmSection
    stop: StopSection = _optional_section()
    output: OutputSection = _optional_section()
    schedule: ScheduleSection = _optional_section()
    faults: FaultsSection = _optional_section()
    network: NetworkSection | None = None
    compression: CompressionSection | None = None

    _source: str | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise fail(f"name = {show(value)} is not a valid scenario name; allowed: {_NAME_ALLOWED}")
        return value

    @model_validator(mode="after")
    def _cross_check(self) -> "Scenario":
        supported = self.algorithm.info.topologies
        if not self.algorithm.info.supports(self.topology.kind):
            raise fail(
                f"kind = {self.topology.kind!r} is not supported by algorithm {self.algorithm.name!r}; "
                f"allowed: {', '.join(supported)}",
                ("topology", "kind"),
            )
        self._check_schedule()
        self._check_compression()
        self._check_stop_metrics()
        if not self.stop.limits() and not self._finishes_by_itself():
            raise fail("no stopping rule is set, so the run would never stop; allowed: set at least one of "
                       + ", ".join(type(self.stop).model_fields) + f" (algorithm {self.algorithm.name!r} does not "
                       "finish by itself)", ("stop",))
        return self

    def _check_stop_metrics(self) -> None:
        """``[stop] gap`` (on rel_gap) and ``[stop] below`` name metrics the algorithm reports, when it declares them
        (`AlgorithmInfo.metrics`, with the runner's own columns): a misspelt name, a name that means something else,
        or one the family reports under a name of its own (BQO's gap_per_cn, Push-Sum's consensus_error) is refused
        here, before the run."""
        info = self.algorithm.info
        reported = info.reported_metrics()
        if reported is None:
            return
        wanted = [("gap", "rel_gap")] if self.stop.gap is not None else []
        wanted += [("below", name) for name in (self.stop.below or {})]
        for key, name in wanted:
            if name in reported:
                continue
            where = (f"gap = {self.stop.gap:g} stops on rel_gap, which" if key == "gap"
                     else f"below names metric {name!r}, which")
            label = f" ({metric(name).label})" if is_registered(name) else ""
            own = [m for m in info.metrics if m in reported]
            raise fail(f"{where} algorithm {self.algorithm.name!r} never reports{label}; allowed: [stop] below = "
                       f"{{metric = threshold}} on a metric it reports: {', '.join(own)}; or the run's: "
                       f"{', '.join(sorted(reported - set(own)))}", ("stop", key))

    def _check_compression(self) -> None:
        """Compression needs messages (a distributed algorithm); exact tags stay raw; ef21 needs every message
        delivered."""
        if self.compression is None:
            return
        info = self.algorithm.info
        if not info.distributed:
            raise fail(f"algorithm {self.algorithm.name!r} runs on a single machine, so there are no messages to "
                       "compress; allowed: no [compression] table", ("compression",))
        spec = self.compression.spec(info.exact_tags, info.exact_tail)
        for tag, choice in spec.tags.items():
            if not choice.lossless and spec.is_exact(tag):
                raise fail(f"tags.{tag}: algorithm {self.algorithm.name!r} declares tag {tag!r} exact (every receiver "
                           "must read it as sent: a result every worker holds as one replicated copy, or indices, "
                           f"counts and flags), so codec = {choice.codec!r} may not encode it; allowed: codec = "
                           f"\"none\", or a codec on a tag that is not exact (exact: "
                           f"{', '.join(info.exact_tags)})", ("compression", "tags", tag, "codec"))
        if spec.uses_ef21 and not self.faults.is_empty:
            raise fail("error_feedback = 'ef21' keeps the receiver's copy of g equal to the sender's only while every "
                       "message arrives, and [faults] can lose or duplicate messages; allowed: error_feedback = 'ef' "
                       "(or 'none'), or no [faults]", ("compression", "error_feedback"))

    def _finishes_by_itself(self) -> bool:
        """Whether the algorithm ends by itself (e.g. every node done or down): `AlgorithmInfo.finishes_by_itself`."""
        return self.algorithm.info.finishes(self.algorithm.params)

    def _check_deterministic_gossip(self) -> None:
        """Time windows need a smallest latency > 0 and no budget on messages or scalars."""
        schedule = self.schedule
        dist = schedule.latency_distribution()
        if not dist.minimum > 0:
            raise fail(f"gossip = 'deterministic' runs the hosts in time windows no longer than the smallest "
                       f"message latency, but [schedule] latency = {show(schedule.latency)} can be "
                       f"{dist.minimum:g}; allowed: a latency with a positive minimum (a constant > 0, a uniform "
                       "distribution with low > 0), or gossip = \"free\"", _GOSSIP_MODE)
        faults = self.faults.model()
        if (faults.crash > 0 or faults.crash_nodes or faults.churn_rate > 0 or faults.outages
                or any(fault_kind(name).takes_nodes_down for name, _ in faults.kinds)) \
                and self._finishes_by_itself():
            raise fail(f"gossip = 'deterministic' with faults that take nodes down: algorithm "
                       f"{self.algorithm.name!r} ends when every node has finished or is down, a node going down or "
                       "coming back can decide that instant, and time windows do not yet find it exactly (a host "
                       "sees the change only at its next program event); allowed: no crash, crash_nodes or "
                       "churn_rate with this algorithm, or gossip = \"free\"", _GOSSIP_MODE)
        for where, key, value in (("schedule", "max_messages", schedule.max_messages),
                                  ("stop", "max_scalars", self.stop.max_scalars)):
            if value is not None:
                raise fail(f"{key} = {value} is a budget that one host meets at an exact message, which hosts in "
                           "time windows cannot see; allowed with gossip = 'deterministic': [schedule] max_time, "
                           "[stop] max_rounds or max_iterations (virtual time), or gossip = \"free\"",
                           (where, key))

    def _check_schedule(self) -> None:
        """Resolve ``[schedule] kind = "auto"`` to the algorithm's scheduler; keys and faults must fit it."""
        info = self.algorithm.info
        natural = info.scheduler
        schedule = self.schedule
        if schedule.kind == "auto":
            schedule.kind = natural
        elif schedule.kind != natural:
            raise fail(f"kind = {schedule.kind!r} is not supported by algorithm {self.algorithm.name!r} (it runs "
                        f"{'in synchronous rounds' if natural == 'sync' else 'on the gossip scheduler'}); allowed: "
                        f"{natural!r} or 'auto'", ("schedule", "kind"))
        engine = self.engine.kind
        if schedule.kind == "gossip" and engine.no_gossip:
            able = [n for n, k in ENGINE_KINDS.items() if not k.no_gossip]
            raise fail(f"name = {engine.name!r} {engine.no_gossip}; allowed with gossip: name = "
                       + " or ".join(f'"{n}"' for n in able), ("engine", "name"))
        if schedule.kind == "gossip" and engine.ray and schedule.eval_messages is not None:
            raise fail(f"eval_messages = {schedule.eval_messages} counts messages in one process; Ray hosts evaluate "
                       "on their own virtual clocks: allowed on engine ray: eval_time", ("schedule", "eval_messages"))
        if schedule.kind == "gossip" and engine.ray and self.engine.gossip == "deterministic":
            self._check_deterministic_gossip()
        if schedule.kind == "gossip" and not self.faults.is_empty:
            stop = self.stop
            budgets = (stop.max_iterations, stop.max_rounds, stop.max_scalars, stop.max_seconds,
                       schedule.max_time, schedule.max_messages)
            if all(b is None for b in budgets) and not self._finishes_by_itself():
                raise fail("a gossip run with faults needs a budget: lost messages can keep a consensus error "
                            "from ever reaching [stop] gap or objective_change, so the run might never end; "
                            "allowed: set [stop] max_rounds, max_iterations, max_scalars or max_seconds, or "
                            "[schedule] max_time or max_messages", ("stop",))
        if schedule.kind != "gossip":
            given = schedule.gossip_keys_given()
            if given:
                raise fail(f"{given[0]} applies to the gossip scheduler, but algorithm {self.algorithm.name!r} runs "
                            "in synchronous rounds; allowed keys with kind = \"sync\": kind, compiled",
                            ("schedule", given[0]))
            if not self.faults.is_empty:
                if not info.distributed:
                    raise fail(f"algorithm {self.algorithm.name!r} runs on a single machine, so there are no "
                                "messages or nodes to fail; allowed: no [faults] section", ("faults",))
                try:
                    self.faults.model().check_sync()
                except ScenarioError as exc:
                    raise fail(str(exc), ("faults",)) from None

    def __eq__(self, other: object) -> bool:
        """Scenarios are equal when all their settings are (where they were loaded from does not matter)."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable

    # -- derived views ---------------------------------------------------------------------------------------

    @property
    def source(self) -> str | None:
        """The file this scenario was loaded from (None for a dict)."""
        return self._source

    @source.setter
    def source(self, path: str | None) -> None:
        self._source = path

    def to_dict(self) -> dict[str, Any]:
        """The fully resolved scenario as a plain dict of sections (no ``None`` values; see module docs).

        Loading the result again gives an equal scenario: ``load_scenario(s.to_dict()) == s``.
        """
        out: dict[str, Any] = {"name": self.name, "description": self.description, "seed": self.seed}
        for section in SECTIONS:
            model = getattr(self, section)
            if section == "topology":
                body = {"kind": model.kind, **model.params}
            elif section == "algorithm":
                body = {"name": model.name, **({"module": model.module} if model.module else {}),
                        **plain(model.params)}
            elif (section == "schedule" and model.kind != "gossip") or (section == "faults" and model.is_empty) \
                    or (section in ("network", "compression") and model is None):
                continue                                       # synchronous rounds, no faults: the defaults
            elif section == "compression":
                body = model.to_table()
            else:
                body = model.model_dump()
            out[section] = plain(body)
        return out

    def to_toml(self) -> str:
        """:meth:`to_dict` written as TOML."""
        return dump_toml(self.to_dict())

    def dataset_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`svmsim.data.load_dataset` for this scenario (seeded by ``seed``)."""
        d = self.data
        kwargs: dict[str, Any] = {"name": d.name, "data_dir": d.data_dir, "test": d.test,
                                  "positive_label": d.positive_label, "n_features": d.n_features,
                                  "scale": d.scale}
        if d.holdout is not None:
            kwargs.update(holdout=d.holdout, holdout_seed=self.seed)
        if d.is_synthetic:
            kwargs.update(d.synthetic_params(), seed=self.seed)
        return kwargs

    def run_directory(self, timestamp: str | None = None) -> Path:
        """``output.run_dir`` if set, else ``<output.dir>/<name>-<seed>-<timestamp>`` (timestamp defaults to now)."""
        if self.output.run_dir:
            return Path(self.output.run_dir)
        if timestamp is None:
            timestamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        return Path(self.output.dir) / f"{self.name}-{self.seed}-{timestamp}"
