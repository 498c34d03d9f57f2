"""Node quantities from gossip programs: what a Python program reports as ``Outbox.signals["counts"]`` and what a
compiled one adds to `GossipKernel.counts` reach the meter per node and per round of the event's time, the same
way on the Python loop, the compiled loop and several hosts."""
from __future__ import annotations

from typing import NamedTuple

import networkx as nx
import numba
import numpy as np
import pytest
from test_schedule_exact import python_host, split_run

from svmsim.comm.message import MessageBatch, Outbox
from svmsim.errors import ProtocolError, ScenarioError
from svmsim.program import GossipKernel, GossipProgram
from svmsim.topology import neighbour_csr

QUANTITIES = ("operations", "kernel_evaluations")


class WorkArrays(NamedTuple):
    counts: np.ndarray          # (quantity, node): running totals
    wakes: np.ndarray           # per node: clock ticks handled (kept apart from the counts, to check them)
    received: np.ndarray        # per node: messages received
    nbr_ptr: np.ndarray
    nbr: np.ndarray


@numba.njit(cache=True)
def work_wake(arrays, node, t, out_dst, out_tag, out_pay):
    """A tick: node % 3 + 1 operations; one message to the neighbour picked by the tick count."""
    k = arrays.wakes[node]
    arrays.wakes[node] = k + 1
    arrays.counts[0, node] += node % 3 + 1
    lo, hi = arrays.nbr_ptr[node], arrays.nbr_ptr[node + 1]
    out_dst[0] = arrays.nbr[lo + k % (hi - lo)]
    out_tag[0] = 0
    out_pay[0, 0] = float(node)
    return 1, False


@numba.njit(cache=True)
def work_receive(arrays, dst, src, tag, payload, t, out_dst, out_tag, out_pay):
    """A delivery: two kernel evaluations."""
    arrays.received[dst] += 1
    arrays.counts[1, dst] += 2
    return 0, False


class Worker(GossipProgram):
    """A gossip program that counts its work in two node quantities (the same functions for both loops)."""

    role = "peer"

    def __init__(self, G, python_counts: bool = True):
        self.ptr, self.nbr = neighbour_csr(G)
        self.n = G.number_of_nodes()
        self.python_counts = python_counts

    def init(self, node_ids, node_data, seed):
        n = self.n
        return WorkArrays(np.zeros((2, n), dtype=np.int64), np.zeros(n, dtype=np.int64),
                          np.zeros(n, dtype=np.int64), self.ptr, self.nbr)

    def _outbox(self, st, node, n_out, dst, pay, before):
        out = Outbox()
        if n_out:
            out.send(MessageBatch("work", np.array([node]), dst[:1].copy(), pay[:1].copy()))
        added = st.counts[:, node] - before
        if self.python_counts and added.any():
            out.signals = {"counts": {q: int(a) for q, a in zip(QUANTITIES, added) if a}}
        return out

    def wake(self, st, nodes, times):
        node = int(nodes[0])
        dst, tag, pay = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros((1, 1))
        before = st.counts[:, node].copy()
        n_out, _ = work_wake(st, node, float(times[0]), dst, tag, pay)
        return st, self._outbox(st, node, n_out, dst, pay, before)

    def receive(self, st, batch, times):
        node = int(batch.dst[0])
        before = st.counts[:, node].copy()
        work_receive(st, node, int(batch.src[0]), 0, batch.rows()[0], float(times[0]), np.zeros(1, np.int64),
                     np.zeros(1, np.int64), np.zeros((1, 1)))
        return st, self._outbox(st, node, 0, None, None, before)

    def kernel(self, st):
        return GossipKernel(arrays=st, wake=work_wake, receive=work_receive, tags=("work",),
                            widths=np.array([1], dtype=np.int64), quantities=QUANTITIES, counts=st.counts)


def _finish(host, until):
    from svmsim.schedule.event_kernels import ST_GROW, ST_TIME

    while (status := host.advance(until)) != ST_TIME:
        host.grow() if status == ST_GROW else host.flush()
    host.meter_in_flight()


def _tables(meter):
    totals, rounds = meter.node_tables()
    return {q: v.tolist() for q, v in totals.items()}, {q: r.tolist() for q, r in rounds.items()}


@pytest.fixture(scope="module")
def graph():
    return nx.random_regular_graph(3, 12, seed=4)


def test_python_and_compiled_loops_meter_the_same_node_work_per_node_and_round(graph):
    until = 12.0
    python, py_states, py_meter = python_host(graph, Worker(graph), compiled=False)
    _finish(python, until)
    compiled, c_states, c_meter = python_host(graph, Worker(graph, python_counts=False), compiled=True)
    assert compiled.compiled
    _finish(compiled, until)
    st = c_states[0]
    np.testing.assert_array_equal(st.wakes, py_states[0].wakes)
    totals, rounds = _tables(c_meter)
    assert (totals, rounds) == _tables(py_meter)
    # the declared amounts, per node, from the program's own counters
    nodes = np.arange(graph.number_of_nodes())
    assert totals["operations"] == (st.wakes * (nodes % 3 + 1)).tolist()
    assert totals["kernel_evaluations"] == (2 * st.received).tolist() and sum(totals["kernel_evaluations"]) > 0
    # per round: the work of the events whose time falls in that round (rounds of 1 time unit, 12 of them)
    assert [r for r, _ in rounds["operations"]] == list(range(12))
    assert sum(a for _, a in rounds["operations"]) == sum(totals["operations"])


@pytest.mark.parametrize("compiled", [False, True])
def test_several_hosts_meter_the_node_work_of_one_host(graph, compiled):
    owner = np.arange(graph.number_of_nodes()) % 3
    (ref, _, ref_meter), (hosts, states, meter, _, _) = split_run(
        graph, Worker(graph, python_counts=not compiled), owner, (None, 10**4, 10**4), until=10.0, window=0.15,
        compiled=compiled)
    assert _tables(meter) == _tables(ref_meter) and _tables(meter)[0]["operations"]


def test_a_gossip_event_reports_work_for_its_own_node_only(graph):
    class Greedy(Worker):
        def wake(self, st, nodes, times):
            st, out = super().wake(st, nodes, times)
            out.signals = {"counts": {"operations": [1, 2]}}
            return st, out

    host, _, _ = python_host(graph, Greedy(graph), compiled=False)
    with pytest.raises(ProtocolError, match="reported 2 amounts of node quantity 'operations'"):
        _finish(host, 3.0)


def test_kernel_counts_of_the_wrong_shape_are_refused(graph):
    class Misshapen(Worker):
        def kernel(self, st):
            k = super().kernel(st)
            k.counts = st.counts[:1]
            return k

    with pytest.raises(ScenarioError, match=r"GossipKernel.counts must be an int64 array of shape"):
        python_host(graph, Misshapen(graph), compiled=True)


def test_a_programs_own_types_stay_out_of_svmsims_numba_cache(graph, tmp_path):
    """A kernel whose arrays are a named tuple of the program's own module (here this test module) uses the default
    crash, recover and prefetch hooks; svmsim's cache index must not name that type, or a later process that cannot
    import the module fails to load it (a Push-Sum run did: ModuleNotFoundError while loading the hooks' index)."""
    import subprocess
    import sys

    from svmsim import program

    host, _, _ = python_host(graph, Worker(graph), compiled=True)
    _finish(host, 2.0)
    for hook in (program._kernel_no_crash, program._kernel_no_recover, program._kernel_no_prefetch):
        assert type(hook._cache).__name__ == "NullCache"          # compiled in memory, never indexed on disk
    scenario = tmp_path / "pushsum.toml"                           # a process that cannot import this module
    scenario.write_text('name = "p"\n[data]\nname = "iris"\n[topology]\nkind = "ring"\n[algorithm]\n'
                        'name = "pushsum"\nnodes = 8\n[schedule]\nkind = "gossip"\n[stop]\nmax_rounds = 3\n'
                        '[output]\nplots = false\n')
    out = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(scenario), "--out", str(tmp_path / "run"),
                          "--quiet", "--no-progress"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
