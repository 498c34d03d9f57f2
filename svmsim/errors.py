"""Error types that svmsim raises for bad input.

Every error that reaches a user names what is wrong and what is allowed. The CLI prints the message of an
`SvmsimError` as one paragraph and exits non-zero, without a traceback.
"""


class SvmsimError(Exception):
    """Base class of every user-facing svmsim error."""


class ScenarioError(SvmsimError):
    """A scenario file or dictionary is invalid (unknown key, wrong type, value out of range)."""


class DataError(SvmsimError, ValueError):
    """A data set is missing, malformed, or not usable for the requested task (e.g. labels not binary); a
    ValueError, as scikit-learn's estimators raise for bad data."""


class TopologyError(SvmsimError):
    """A topology cannot be built or is unusable (e.g. disconnected, unknown kind, bad parameter)."""


class InfeasibleParameterError(SvmsimError, ValueError):
    """A parameter is outside the range where the problem is defined (e.g. nu below 1/min(n1, n2)); a ValueError,
    as scikit-learn's estimators raise for bad parameters."""


class ProtocolError(SvmsimError):
    """A node program broke the messaging rules (e.g. sent along an edge that is not in the topology)."""


class EngineFailure(SvmsimError):
    """The machinery a run was hosted on failed (e.g. a Ray host actor died): `hosts` names the hosts lost and
    `node_ids` the logical nodes they carried; the run keeps what was measured before."""

    def __init__(self, message: str, hosts: tuple = (), node_ids: tuple = ()):
        super().__init__(message)
        self.hosts, self.node_ids = tuple(hosts), tuple(node_ids)


class PluginError(ScenarioError):
    """A plugin (an entry point of an installed distribution, or a module a scenario names) cannot be loaded or
    does not provide what its kind needs; the message names the module and what it lacks."""
