"""Algorithm families, one module or package per paper; found by discovery (`registry`) and imported on use."""
from .registry import ALGORITHMS, AlgorithmInfo, algorithm_names, get_algorithm, load_all, register

__all__ = ["ALGORITHMS", "AlgorithmInfo", "get_algorithm", "algorithm_names", "load_all", "register"]
