"""A ready node program that runs one collective of `svmsim.comm.collectives` among peers (not a family: it
registers no algorithm). Every participant is an initiator; the run ends when no message is in flight, and each
node's `value` is then its result (reduce: at the root).

    p = plan("allreduce", "ring", nodes, d)
    RoleSpec("peer", CollectiveProgram(p), nodes, [{"value": v} for v in values])
"""
from __future__ import annotations

import numba
import numpy as np

from ..comm.collectives import Plan, collective_receive, collective_start
from ..program import NodeProgram, SyncKernel, kernel_step

__all__ = ["CollectiveProgram", "collective_kernel_step"]


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def collective_kernel_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                           out_payload):
    """The program's round step: start in its first round, then apply the messages of each round."""
    n_out = 0
    if st.started[0] == 0:
        n_out = collective_start(st, out_tag, out_src, out_dst, out_payload, n_out)
    n_out = collective_receive(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                               out_payload, n_out)
    return n_out, -1, 0


class CollectiveProgram(NodeProgram):
    """Runs `plan` among its nodes; node data: ``{"value": d floats}`` (or the array itself) per node. Tags are
    ``plan.tag_table(up, down)``."""

    initiator = True

    def __init__(self, plan: Plan, up: str = "up", down: str = "down", role: str = "peer"):
        self.plan = plan
        self.role = role
        self.up, self.down = up, down
        table = plan.tag_table(up, down) or [(up, plan.d)]
        self.tags = tuple(t for t, _ in table)
        self.widths = np.array([w for _, w in table], np.int64)

    def init(self, node_ids, node_data, seed):
        values = [np.asarray(v["value"] if isinstance(v, dict) else v, dtype=np.float64) for v in node_data]
        arrays = self.plan.arrays(node_ids, np.array(values).reshape(len(node_ids), -1),
                                  {t: i for i, t in enumerate(self.tags)}, self.up, self.down)
        return arrays, self.plan.max_out(node_ids)

    def kernel(self, state):
        st, max_out = state
        return SyncKernel(st, collective_kernel_step, self.tags, self.widths, max_out)

    def step(self, state, inbox, round_):
        return state, kernel_step(self.kernel(state), inbox, round_)

    def observe(self, state):
        st = state[0]
        hosted = st.nodes[np.flatnonzero(st.member >= 0)][np.argsort(st.member[st.member >= 0])]
        return {"ids": hosted, "value": st.value.copy(), "finished": st.finished.astype(bool)}
