"""Algorithm families, one module per paper family (see each module's docstring for its paper)."""
from .registry import ALGORITHMS, AlgorithmInfo, get_algorithm, register

__all__ = ["ALGORITHMS", "AlgorithmInfo", "get_algorithm", "register"]
