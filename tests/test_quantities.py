"""The registry of quantities: names, kinds and units in one place, read by the meter, the ledger and the sweeps."""
from __future__ import annotations

import numpy as np
import pytest

from svmsim.comm import MESSAGE_QUANTITIES
from svmsim.comm.quantities import KINDS, QUANTITIES, by_kind, edge_weighted_total, linear_edge_weights, quantity
from svmsim.errors import ScenarioError
from svmsim.sweep_costs import COST_COLUMNS, costs_at


def test_every_quantity_has_a_known_kind_a_unit_and_a_description_and_a_unique_name():
    names = [q.name for q in QUANTITIES]
    assert len(set(names)) == len(names)
    for q in QUANTITIES:
        assert q.kind in KINDS and q.unit and q.description
        assert (q.per_message is not None) == (q.kind == "message")
        assert q.per_edge is None or q.kind == "derived"


def test_the_message_quantities_are_the_ledger_columns_in_order():
    assert MESSAGE_QUANTITIES == ("messages", "scalars", "bytes")
    assert [q.per_message(5, 40) for q in by_kind("message")] == [1, 5, 40]
    assert quantity("kernel_evaluations").kind == "node"
    assert quantity("modelled_time").unit == "s"
    with pytest.raises(KeyError, match="'flops' is not registered"):
        quantity("flops")
    with pytest.raises(ValueError, match="kind 'edge' is unknown"):
        by_kind("edge")


def test_the_cost_columns_of_registered_quantities_keep_their_names_and_order():
    row = {"iteration": 3, "round": 9, "messages": 12, "scalars": 40, "wall_time": 0.5, "rel_gap": 1e-3,
           "modelled_time": 2.5}
    out = costs_at([row], 1e-2, "rel_gap")
    assert list(out) == [c for c in COST_COLUMNS if c != "cost_messages_per_node"] + ["reached"]
    assert out["cost_scalars"] == 40.0 and out["cost_messages"] == 12.0 and out["cost_modelled_time"] == 2.5


def test_linear_edge_weights_override_both_directions_of_a_link():
    ptr = np.array([0, 2, 4, 6])                 # a triangle 0-1-2, CSR rows sorted
    nbr = np.array([1, 2, 0, 2, 0, 1])
    per_message, per_byte = linear_edge_weights(ptr, nbr, {"m": 1.0, "b": 0.5}, [((0, 2), {"m": None, "b": 4.0})])
    assert per_message.tolist() == [1.0] * 6
    assert per_byte.tolist() == [0.5, 4.0, 0.5, 0.5, 4.0, 0.5]
    edges = np.array([[1, 2, 3, 4, 5, 6], [10] * 6, [8, 16, 24, 32, 40, 48]], np.int64)
    assert edge_weighted_total(edges, {"messages": per_message, "bytes": per_byte}) == \
        21.0 + 0.5 * (8 + 24 + 32 + 48) + 4.0 * (16 + 40)
    with pytest.raises(ScenarioError, match=r"link 1-5 is not an edge"):
        linear_edge_weights(ptr, nbr, {"m": 1.0}, [((1, 5), {"m": 2.0})])


def test_an_optional_quantity_gets_its_cost_column_only_where_a_run_models_it():
    row = {"iteration": 3, "round": 9, "messages": 12, "scalars": 40, "rel_gap": 1e-3, "energy": 0.25}
    assert costs_at([row], 1e-2, "rel_gap")["cost_energy"] == 0.25
    assert "cost_energy" not in costs_at([{k: v for k, v in row.items() if k != "energy"}], 1e-2, "rel_gap")
    assert quantity("energy").kind == "derived" and quantity("energy").unit == "J"
