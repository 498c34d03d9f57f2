"""Data for svmsim: LIBSVM loading, named data sets, synthetic generators, and partitioning across nodes.

Typical use::

    from svmsim.data import load_dataset, partition
    ds = load_dataset("a9a", test="auto")             # needs SVMSIM_DATA_DIR or data_dir=
    parts = partition(ds.y, 20, "stratified", seed=0)  # one sorted index array per node
"""

from svmsim.data.libsvm import KNOWN_POSITIVE_LABELS, load_libsvm, to_pm1
from svmsim.data.partition import (PARTITION_SCHEMES, partition, partition_scheme, partition_schemes,
                                   register_partition, scheme_params, train_test_split_indices)
from svmsim.data.registry import (
    BUILTIN_DATASETS,
    DATA_DIR_ENV,
    SCALINGS,
    Dataset,
    DatasetInfo,
    check_files,
    list_datasets,
    load_dataset,
    make_dataset,
    resolve_data_dir,
    scale_dataset,
    scale_to_unit_box,
    verify_checksum,
)
from svmsim.data.synthetic import SYNTHETIC_KINDS, make_nonseparable, make_separable, make_sparse_nonseparable

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
