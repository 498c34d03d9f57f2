"""Every registered algorithm passes the conformance checks (svmsim.conformance), one test id per
algorithm and check; and the checks catch what they are for (a toy server-client algorithm with planted defects)."""
from __future__ import annotations

import dataclasses
from typing import Literal

import numba
import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field

from svmsim.algorithms import algorithm_names, get_algorithm
from svmsim import conformance as C
from svmsim.algorithms.registry import ALGORITHMS, AlgorithmInfo, Conformance
from svmsim.comm.message import MessageBatch, Outbox, frozen_ids
from svmsim.deployment import Deployment
from svmsim.program import NodeProgram, RoleSpec
from svmsim.topology import build_topology


#: the compiled-loop check compiles a round loop of its own for each of these (30-110 s each on two cores, every
#: session: the loop cache is the session's); one algorithm per family keeps the check in the default suite (bqo-e,
#: pegasos-n, saddle-dsvc, gadget, pushsum, ...), these run with `pytest -m slow`
SLOW_COMPILED = frozenset({"pragam", "pragam-b", "ls-bmrm", "qp-bmrm", "bqo-a", "tron", "dsvm-ave"})
#: variants whose compiled-loop check compiles a loop of its own (bqo-e over a tree of 5 workers: 33 s; the plain
#: bqo-e check holds the compiled all-reduce loop, and the Python-round checks of the variant stay)
SLOW_COMPILED_VARIANTS = frozenset({"bqo-e[allreduce=tree,workers=5]-compiled"})


def _slow(case) -> bool:
    return case.check == "compiled" and (case.algorithm in SLOW_COMPILED or case.id in SLOW_COMPILED_VARIANTS)


def _cases():
    return [pytest.param(case, id=case.id, marks=[pytest.mark.slow] if _slow(case) else []) for case in C.cases()]


@pytest.fixture(scope="module")
def data_dir_env(shared_data_dir):
    """SVMSIM_DATA_DIR for the small problems that read a LIBSVM file (heart_scale)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SVMSIM_DATA_DIR", str(shared_data_dir))
    yield shared_data_dir
    mp.undo()


@pytest.mark.parametrize("case", _cases())
def test_conformance(case, data_dir_env):
    case.run_in_pytest()


def test_every_registered_algorithm_declares_its_conformance():
    for name in algorithm_names():
        info = get_algorithm(name)
        assert info.conformance is not None, f"{name} declares no Conformance(params=...)"
        assert set(info.conformance.skips) <= set(C.check_names(info)), (name, info.conformance.skips)
        assert all(len(r) > 20 for r in info.conformance.skips.values()), f"{name}: a skip needs a reason"


def test_an_algorithm_without_declarations_fails_every_check_saying_what_to_declare():
    info = dataclasses.replace(get_algorithm("saddle-dsvc"), name="saddle-dsvc-unlisted", conformance=None)
    with pytest.raises(AssertionError, match=r"conformance=Conformance\(params="):
        C.small_params(info)
    for name, check in C.yield_checks(info):
        with pytest.raises(AssertionError, match="declares no conformance parameters"):
            check(info, C.small_problem(info))


def test_a_skip_of_a_check_the_algorithm_does_not_have_is_refused():
    info = dataclasses.replace(get_algorithm("gilbert"),
                               conformance=Conformance({"eps": 1e-3}, skips={"grouping": "a single machine has none"}))
    with pytest.raises(AssertionError, match="names checks it does not have"):
        list(C.yield_checks(info))


def test_a_skip_without_a_reason_is_refused():
    with pytest.raises(TypeError, match="needs the reason"):
        Conformance({"eps": 1e-3}, skips={"seed": ""})


# ----------------------------------------------------------------------------------------------------------------
# The checks catch planted defects: a toy server-client algorithm (server pings, every client answers one value)


class ToyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    clients: int = Field(4, ge=1)
    defect: Literal["none", "grouping", "miscount", "seedless", "program_state", "function_on_instance"] = "none"


class LaxToyParams(ToyParams):
    model_config = ConfigDict(extra="allow")


class ToyServer(NodeProgram):
    role = "server"
    initiator = True

    def init(self, node_ids, node_data, seed):
        return {"clients": frozen_ids(node_data[0]), "it": 0, "total": 0.0}

    def step(self, st, inbox, round_):
        out = Outbox()
        pong = inbox.get("pong")
        if pong is None:
            out.send(MessageBatch.broadcast("ping", 0, st["clients"], [float(st["it"])]))
            return st, out
        st["total"] += float(pong.rows()[:, 0] @ np.arange(1, pong.n_messages + 1))
        st["it"] += 1
        out.signals = {"iteration": st["it"], "wake": True}
        return st, out

    def observe(self, st):
        return {"it": st["it"], "total": st["total"]}


@numba.njit(cache=True)
def _toy_scale(x):
    return 2.0 * x


class ToyClient(NodeProgram):
    role = "client"

    def __init__(self, defect):
        self.defect = defect
        self.pings = 0                            # used by the "program_state" defect only
        if defect == "function_on_instance":      # a numba function kept on the instance travels by value
            self.scale = _toy_scale

    def init(self, node_ids, node_data, seed):
        if self.defect == "seedless":
            base = node_ids.astype(float)
        else:
            base = np.array([np.random.default_rng([seed, int(n)]).random() for n in node_ids])
        if self.defect == "grouping":
            base = base + len(node_ids)           # a group-wide quantity leaks into per-node results
        return {"ids": frozen_ids(node_ids), "base": base, "answers": np.zeros(len(node_ids), dtype=np.int64)}

    def step(self, st, inbox, round_):
        ping = inbox["ping"]
        if self.defect == "program_state":        # a step that depends on the program object, not on its state
            self.pings += 1
            st["base"] = st["base"] + (self.pings == 3)
        pos = ping.dst - st["ids"][0]
        st["answers"][pos] += 1
        out = Outbox()
        out.send(MessageBatch.gather("pong", ping.dst, 0, st["base"][pos] * (ping.rows()[:, 0] + 1)))
        return st, out

    def observe(self, st):
        return {"base": st["base"].copy(), "answers": st["answers"].copy()}


def build_toy(params, problem):
    k = params.clients
    clients = np.arange(1, k + 1, dtype=np.int64)
    roles = [RoleSpec("server", ToyServer(), np.array([0]), [clients]),
             RoleSpec("client", ToyClient(params.defect), clients, [None] * k)]

    def declared(obs):
        sent = 2 * int(sum(o["answers"].sum() for o in obs["client"]))
        return sent + (1 if params.defect == "miscount" else 0)

    return Deployment(roles=roles, topology=build_topology("star", k + 1), node_names=[str(i) for i in range(k + 1)],
                      evaluate=lambda obs: {"total": obs["server"][0]["total"]}, declared_scalars=declared,
                      model=lambda obs: {"w": np.array([obs["server"][0]["total"]])})


@pytest.fixture
def toy(monkeypatch):
    """The toy algorithm under a name, with small parameters `defect`; registered for the scenario layer."""
    def make(defect="none", Params=ToyParams):
        name = f"toy-{defect}"
        info = AlgorithmInfo(name=name, family="toy", paper="-", distributed=True, Params=Params, build=build_toy,
                             description="toy server-client algorithm",
                             conformance=Conformance(params={"clients": 5, "defect": defect}))
        monkeypatch.setitem(ALGORITHMS, name, info)
        return info

    return make


def test_the_toy_passes_the_checks_that_apply(toy):
    info = toy()
    for name in ("grouping", "ledger", "replay", "seed", "restore", "travel", "params"):
        dict(C.yield_checks(info))[name](info, C.small_problem(info))
    with pytest.raises(AssertionError, match="lent a compiled step"):       # no kernel and no declared reason
        C.check_compiled(info, C.small_problem(info))


@pytest.mark.parametrize("defect, check, message", [
    ("grouping", C.check_grouping, "splitting every role into 2 groups"),
    ("miscount", C.check_ledger, "declared_scalars"),
    ("seedless", C.check_seed, "gave the same run"),
    ("program_state", C.check_restore, "taken up by a fresh copy of its program changed the run"),
    ("function_on_instance", C.check_travel, "'client' program pickles the numba function.*_toy_scale by value"),
])
def test_a_planted_defect_fails_its_check(toy, defect, check, message):
    info = toy(defect)
    with pytest.raises(AssertionError, match=message):
        check(info, C.small_problem(info))


def test_parameters_that_are_not_refused_fail_the_params_check(toy):
    info = toy("none", LaxToyParams)
    with pytest.raises(AssertionError, match="no_such_parameter=1.*was accepted"):
        C.check_params(info, C.small_problem(info))
