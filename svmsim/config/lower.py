"""What configuration reads from the layers below it (registries the schema checks names against, the fault and
latency models it builds to check settings), imported in this one place: when one moves, one line here changes.
Each is a module of declarations: validating a scenario imports no compiler (numba), no graph library and no
scipy, only the algorithm it names."""
from svmsim.algorithms.registry import AlgorithmInfo, algorithm_names, get_algorithm, load_module
from svmsim.comm.codecs import EF_MODES, CodecChoice, CompressionSpec, codec_names, get_codec, resolve_codec_params
from svmsim.core.distributions import CLOCKS, Distribution
from svmsim.core.params import check_params
from svmsim.core.fault_kinds import fault_kind, fault_kinds, resolve_fault_params
from svmsim.core.metrics import is_registered, metric
from svmsim.data.catalog import BUILTIN_DATASETS, SCALINGS
from svmsim.data.partition import PARTITION_SCHEMES, partition_scheme, partition_schemes, scheme_params
from svmsim.data.synthetic import SYNTHETIC_KINDS
from svmsim.engine.kinds import (ENGINE_KINDS, GOSSIP_MODES, check_engine_params, engine_kind, engine_names,
                                 ray_engine_names)
from svmsim.faults import FAULT_KEYS, FaultModel
from svmsim.topology_specs import TOPOLOGIES, ParamSpec, resolve_params, topology_kinds, topology_spec

__all__ = ["algorithm_names", "AlgorithmInfo", "get_algorithm", "load_module", "BUILTIN_DATASETS", "PARTITION_SCHEMES",
           "SCALINGS", "SYNTHETIC_KINDS", "ENGINE_KINDS", "engine_names", "engine_kind", "ray_engine_names",
           "check_engine_params", "GOSSIP_MODES", "FAULT_KEYS", "FaultModel", "fault_kind", "fault_kinds",
           "resolve_fault_params", "CLOCKS",
           "Distribution", "TOPOLOGIES", "topology_kinds", "topology_spec", "partition_scheme", "partition_schemes",
           "scheme_params", "ParamSpec", "resolve_params", "is_registered", "metric", "EF_MODES", "CodecChoice",
           "CompressionSpec", "codec_names", "get_codec", "resolve_codec_params", "check_params"]
