"""What configuration reads from the layers below it (registries the schema checks names against, the fault and
latency models it builds to check settings), imported in this one place: when one moves, one line here changes."""
from svmsim.algorithms.registry import AlgorithmInfo, algorithm_names, get_algorithm, load_module
from svmsim.data import (BUILTIN_DATASETS, PARTITION_SCHEMES, SCALINGS, SYNTHETIC_KINDS, partition_scheme,
                         partition_schemes, scheme_params)
from svmsim.engine import ENGINES, GOSSIP_MODES
from svmsim.faults import FAULT_KEYS, FaultModel
from svmsim.core.metrics import is_registered, metric
from svmsim.core.timing import CLOCKS, Distribution
from svmsim.topology import TOPOLOGIES, ParamSpec, resolve_params, topology_kinds, topology_spec

__all__ = ["algorithm_names", "AlgorithmInfo", "get_algorithm", "load_module", "BUILTIN_DATASETS", "PARTITION_SCHEMES",
           "SCALINGS", "SYNTHETIC_KINDS", "ENGINES", "GOSSIP_MODES", "FAULT_KEYS", "FaultModel", "CLOCKS",
           "Distribution", "TOPOLOGIES", "topology_kinds", "topology_spec", "partition_scheme", "partition_schemes",
           "scheme_params", "ParamSpec", "resolve_params", "is_registered", "metric"]
