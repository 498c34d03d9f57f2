"""svmsim: simulate distributed SVM training with exact communication metering.

    import svmsim
    result = svmsim.run("scenarios/quickstart.toml")          # or a dict, or a Scenario
    result.metrics[-1]["rel_gap"], result.ledger.totals

The command line: `svmsim run | sweep | validate | check | list` (`svmsim --help`); algorithms of one's own:
`svmsim.api`.
"""
from .errors import (DataError, InfeasibleParameterError, ProtocolError, ScenarioError, SvmsimError,
                     TopologyError)

__version__ = "0.1.0"

__all__ = ["run", "load_scenario", "RunResult", "SvmsimError", "ScenarioError", "DataError", "TopologyError",
           "InfeasibleParameterError", "ProtocolError", "__version__"]


def __getattr__(name):
    # heavy modules (numba kernels, ray) load on first use so that `svmsim --help` stays fast
    if name in ("run", "RunResult"):
        from . import runner

        return getattr(runner, name)
    if name == "load_scenario":
        from .config import load_scenario

        return load_scenario
    raise AttributeError(name)
