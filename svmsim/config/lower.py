"""What configuration reads from the layers below it (registries the schema checks names against, the fault and
latency models it builds to check settings), imported in this one place: when one moves, one line here changes.
Each is a module of declarations: validating a scenario imports no compiler (numba), no graph library and no
scipy, only the algorithm it names."""
from svmsim.algorithms.registry import AlgorithmInfo, algorithm_names, get_algorithm, load_module
from svmsim.core.distributions import CLOCKS, Distribution
from svmsim.data.catalog import BUILTIN_DATASETS, SCALINGS
from svmsim.data.partition import PARTITION_SCHEMES, partition_scheme, partition_schemes, scheme_params
from svmsim.data.synthetic import SYNTHETIC_KINDS
from svmsim.engine import ENGINES, GOSSIP_MODES
from svmsim.faults import FAULT_KEYS, FaultModel
from svmsim.topology_specs import TOPOLOGIES, ParamSpec, resolve_params, topology_kinds, topology_spec

__all__ = ["algorithm_names", "AlgorithmInfo", "get_algorithm", "load_module", "BUILTIN_DATASETS", "PARTITION_SCHEMES",
           "SCALINGS", "SYNTHETIC_KINDS", "ENGINES", "GOSSIP_MODES", "FAULT_KEYS", "FaultModel", "CLOCKS",
           "Distribution", "TOPOLOGIES", "topology_kinds", "topology_spec", "partition_scheme", "partition_schemes",
           "scheme_params", "ParamSpec", "resolve_params"]
