"""Exact Shapley values on toy games computed by hand."""

import pytest

from safetyrepro.crosspkg.shapley import shapley, shapley_by_orderings


def game(table):
    return lambda s: table[frozenset(s)]


def test_two_axes_by_hand():
    v = game({frozenset(): 0, frozenset("a"): 10, frozenset("b"): 20, frozenset("ab"): 50})
    # phi_a = 1/2 (10 - 0) + 1/2 (50 - 20) = 20; phi_b = 1/2 (20 - 0) + 1/2 (50 - 10) = 30
    assert shapley("ab", v) == pytest.approx({"a": 20.0, "b": 30.0})


def test_three_axes_by_hand():
    t = {"": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "ac": 5, "bc": 6, "abc": 10}
    v = game({frozenset(k): x for k, x in t.items()})
    # phi_a = 1/3*1 + 1/6*(4-2) + 1/6*(5-3) + 1/3*(10-6) = 7/3, and likewise 10/3, 13/3
    phi = shapley("abc", v)
    assert phi == pytest.approx({"a": 7 / 3, "b": 10 / 3, "c": 13 / 3})
    assert sum(phi.values()) == pytest.approx(10.0)  # efficiency: v(all) - v(none)
    assert shapley_by_orderings("abc", v) == pytest.approx(phi)


def test_additive_game_and_null_axis():
    weights = {"x": 0.1, "y": -0.3, "z": 0.0}
    v = lambda s: sum(weights[p] for p in s)  # noqa: E731
    assert shapley("xyz", v) == pytest.approx(weights)


def test_symmetric_interaction_is_split_evenly():
    v = lambda s: 1.0 if len(s) == 2 else 0.0  # noqa: E731  (pure interaction)
    assert shapley("pq", v) == pytest.approx({"p": 0.5, "q": 0.5})


def test_single_and_empty():
    assert shapley(["only"], lambda s: 3.0 * len(s)) == {"only": 3.0}
    assert shapley([], lambda s: 1.0) == {}
