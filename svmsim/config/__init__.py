"""Scenario files: one TOML file (or dict) describes a whole svmsim experiment.

A scenario names the data, how training points are partitioned over nodes, the topology, the engine, the
algorithm and its parameters, the stopping rule, the seed and the outputs::

    name = "quickstart"
    seed = 0

    [data]
    name = "iris"

    [algorithm]
    name = "saddle-dsvc"
    eps = 1e-3

    [stop]
    max_iterations = 100000

Entry points:

* :func:`load_scenario` -- read a TOML file or a dict, apply dotted-key overrides, validate;
* :func:`validate_file` -- the same for ``svmsim validate``;
* :func:`parse_override` / :func:`parse_overrides` -- ``"engine.name=ray"`` strings from the command line;
* :func:`dump_toml` -- write a resolved scenario (``Scenario.to_dict()``) back as TOML.

Every problem is reported as one :class:`~svmsim.errors.ScenarioError` whose message names the file, the key,
the bad value and what is allowed, e.g. ``quick.toml: [stop] gap = 2.0 is out of range; allowed: a number in
(0, 1)``. Values are checked strictly: a string is never silently turned into a number, nor a number into a
boolean.

Modules: `schema` (`Scenario`, ``[schedule]``, ``[faults]``) and `sections` (the other tables), `messages`
(validation errors as one readable message), `loading` (files, overrides), `sweep_table` (the ``[sweep]`` table),
`values` (plain values, TOML), `lower` (what configuration reads from the layers below it).
"""
from .loading import apply_overrides, load_scenario, parse_override, parse_overrides, read_toml, validate_file
from .schema import GOSSIP_SCHEDULE_KEYS, SCHEDULERS, FaultsSection, Scenario, ScheduleSection
from .sections import (AlgorithmSection, DataSection, EngineSection, OutputSection, PartitionSection, StopSection,
                       TopologySection)
from .sweep_table import SHORT_NAMES, SweepSpec, Variant, check_param, check_sweep_table
from .values import SECTIONS, SYNTHETIC_KEYS, dump_toml

__all__ = [
    "Scenario", "DataSection", "PartitionSection", "TopologySection", "EngineSection", "AlgorithmSection",
    "StopSection", "OutputSection", "ScheduleSection", "FaultsSection", "SECTIONS", "SYNTHETIC_KEYS",
    "SCHEDULERS", "GOSSIP_SCHEDULE_KEYS", "load_scenario", "validate_file", "parse_override", "parse_overrides",
    "apply_overrides", "dump_toml", "read_toml", "SweepSpec", "Variant", "SHORT_NAMES", "check_param",
    "check_sweep_table",
]
