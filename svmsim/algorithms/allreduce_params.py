"""The ``[algorithm]`` keys and topologies that every run of all-reduce workers shares (paper 001's BQO workers and
TRON, paper 004's Pragam, BMRM and Pegasos-n): declarations only, read when their algorithms are registered and
their scenarios validated; `allreduce` runs the workers.
"""
from __future__ import annotations

import json
from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from ..comm.patterns import pattern_names

__all__ = ["WORKER_TOPOLOGIES", "AllreducePattern", "pattern_field"]

#: the topology kinds a run of all-reduce workers accepts (the pattern's links are checked against it)
WORKER_TOPOLOGIES = ("complete", "star", "ring", "tree", "hypercube", "line", "edge_list", "grid", "random_k_out",
                     "erdos_renyi", "small_world", "expander")


def _known_pattern(value):
    """``auto`` or a registered pattern (`comm.patterns`), refused like a ``Literal`` choice otherwise (any other
    value, of any type)."""
    allowed = ("auto", *pattern_names())
    if not isinstance(value, str) or value not in allowed:
        shown = [repr(a) for a in allowed]
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": ", ".join(shown[:-1]) + " or " + shown[-1]})
    return value


#: an ``allreduce`` key of an algorithm's parameters: "auto" or the name of a registered pattern
AllreducePattern = Annotated[str, BeforeValidator(_known_pattern)]


def pattern_field(description: str):
    """The pydantic field of an `AllreducePattern` key (default "auto"; its allowed values named from the registry)."""
    return Field("auto", description=description,
                 json_schema_extra={"allowed": ", ".join(json.dumps(a) for a in ("auto", *pattern_names()))})
