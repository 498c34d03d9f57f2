"""Data for svmsim: LIBSVM loading, named data sets, synthetic generators, and partitioning across nodes.

Typical use::

    from svmsim.data import load_dataset, partition
    ds = load_dataset("a9a", test="auto")             # needs SVMSIM_DATA_DIR or data_dir=
    parts = partition(ds.y, 20, "stratified", seed=0)  # one sorted index array per node

Modules: `catalog` (the built-in sets and scalings, by name), `synthetic` (the generators), `partition` (the
schemes), `libsvm` (reading files), `registry` (loading a set by name). The readers and loaders (`libsvm`,
`registry`: scipy) are imported on first use of one of their names, so that checking a scenario's names imports
no file reader and no scipy.
"""
from __future__ import annotations

import importlib

from svmsim.data.catalog import BUILTIN_DATASETS, SCALINGS
from svmsim.data.partition import (PARTITION_SCHEMES, partition, partition_scheme, partition_schemes,
                                   register_partition, scheme_params, train_test_split_indices)
from svmsim.data.synthetic import SYNTHETIC_KINDS, make_nonseparable, make_separable, make_sparse_nonseparable

#: the names of the readers and loaders -> their module (imported on first use)
_LOADERS = {
    "KNOWN_POSITIVE_LABELS": "libsvm", "load_libsvm": "libsvm", "to_pm1": "libsvm",
    "DATA_DIR_ENV": "registry", "Dataset": "registry", "DatasetInfo": "registry", "check_files": "registry",
    "list_datasets": "registry",
    "load_dataset": "registry", "make_dataset": "registry", "resolve_data_dir": "registry",
    "scale_dataset": "registry", "scale_to_unit_box": "registry", "verify_checksum": "registry",
}

__all__ = [
    "BUILTIN_DATASETS",
    "DATA_DIR_ENV",
    "Dataset",
    "DatasetInfo",
    "check_files",
    "KNOWN_POSITIVE_LABELS",
    "PARTITION_SCHEMES",
    "partition_scheme",
    "partition_schemes",
    "register_partition",
    "scheme_params",
    "SCALINGS",
    "SYNTHETIC_KINDS",
    "list_datasets",
    "load_dataset",
    "load_libsvm",
    "make_dataset",
    "make_nonseparable",
    "make_separable",
    "make_sparse_nonseparable",
    "partition",
    "resolve_data_dir",
    "scale_dataset",
    "scale_to_unit_box",
    "to_pm1",
    "train_test_split_indices",
    "verify_checksum",
]


def __getattr__(name: str):
    if name in _LOADERS:
        value = getattr(importlib.import_module(f"{__name__}.{_LOADERS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LOADERS))
