"""Property tests (hypothesis): the ledger never overspends, parallel composition costs the
maximum, and the individual Rényi filter never lets a record's spend pass its bound."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.accounting import (
    BudgetExceededError,
    BudgetLedger,
    IndividualRenyiFilter,
    RoundCostTable,
)

eps_values = st.floats(min_value=0.0, max_value=2.0, allow_nan=False, allow_infinity=False)
charges = st.lists(st.tuples(st.one_of(st.none(), st.sampled_from(["w0", "w1", "w2", "w3"])),
                             eps_values), max_size=60)


@settings(max_examples=300, deadline=None)
@given(total=st.floats(min_value=0.01, max_value=5.0), ops=charges)
def test_ledger_never_exceeds_its_budget(total, ops):
    ledger = BudgetLedger(total_epsilon=total)
    seq = Fraction(0)
    parts: dict[str, Fraction] = {}
    for partition, eps in ops:
        before = ledger.to_dict()
        try:
            ledger.charge(eps, partition=partition)
        except BudgetExceededError as err:
            assert ledger.to_dict() == before  # a refusal changes nothing
            assert err.requested == eps
            exact_left = Fraction(repr(total)) - seq - (
                parts.get(partition, Fraction(0)) if partition is not None
                else max(parts.values(), default=Fraction(0)))
            assert Fraction(repr(eps)) > exact_left  # refused only when it truly did not fit
            continue
        amount = Fraction(repr(eps))
        if partition is None:
            seq += amount
        else:
            parts[partition] = parts.get(partition, Fraction(0)) + amount
        # independent model of the guarantee: sequential + max over disjoint partitions
        assert seq + max(parts.values(), default=Fraction(0)) <= Fraction(repr(total))
        assert ledger.spent == float(seq + max(parts.values(), default=Fraction(0)))
    assert ledger.spent <= total


@settings(max_examples=200, deadline=None)
@given(per_window=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30))
def test_parallel_charges_cost_the_maximum_not_the_sum(per_window):
    ledger = BudgetLedger(total_epsilon=1.0)
    ledger.charge_parallel({f"w{i}": e for i, e in enumerate(per_window)})
    assert ledger.spent == max(per_window)
    for i, e in enumerate(per_window):  # each window still has exactly its own remainder
        assert ledger.remaining(partition=f"w{i}") == pytest.approx(1.0 - e, abs=1e-12)


def test_parallel_charge_is_all_or_nothing():
    ledger = BudgetLedger(total_epsilon=1.0)
    ledger.charge(0.6, partition="w1")
    with pytest.raises(BudgetExceededError) as err:
        ledger.charge_parallel({"w0": 0.5, "w1": 0.5})
    assert err.value.partition == "w1" and err.value.remaining == pytest.approx(0.4)
    assert ledger.partition_spent("w0") == 0.0 and ledger.spent == 0.6


def test_decimal_charges_are_exact():
    ledger = BudgetLedger(total_epsilon=1.0)
    for e in (0.7, 0.2, 0.1):  # 0.7 + 0.2 + 0.1 > 1.0 in binary floating point
        ledger.charge(e)
    assert ledger.spent == 1.0 and ledger.remaining() == 0.0
    with pytest.raises(BudgetExceededError):
        ledger.charge(1e-12)


def test_closed_partitions_still_count():
    ledger = BudgetLedger(total_epsilon=1.0)
    ledger.charge(0.9, partition="old")
    ledger.close("old")
    ledger.charge(0.2, partition="new")
    with pytest.raises(BudgetExceededError):
        ledger.charge(0.2)  # 0.2 sequential + max(0.9 closed, 0.2) > 1
    restored = BudgetLedger.from_dict(ledger.to_dict())
    assert restored.spent == ledger.spent == 0.9


@settings(max_examples=300, deadline=None)
@given(bound=st.floats(min_value=0.01, max_value=10.0),
       rounds=st.lists(st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1,
                                max_size=1), min_size=1, max_size=1),
       data=st.data())
def test_filter_never_lets_a_record_pass_its_bound(bound, rounds, data):
    f = IndividualRenyiFilter(order=8.0, bound=bound)
    n_rounds = data.draw(st.integers(min_value=1, max_value=40))
    for _ in range(n_rounds):
        arrivals = data.draw(st.integers(min_value=0, max_value=5))
        f.add(arrivals)  # late arrivals join with a full budget
        costs = np.array(data.draw(st.lists(st.floats(min_value=0.0, max_value=bound),
                                            min_size=len(f), max_size=len(f))))
        before = f.spent.copy()
        cont = f.step(costs)
        assert np.all(f.spent <= bound)
        np.testing.assert_array_equal(f.spent[cont], before[cont] + costs[cont])
        np.testing.assert_array_equal(f.spent[~cont], before[~cont])  # HALT: charged nothing
        assert np.all(before[~cont] + costs[~cont] > bound)  # only halted if it had to be
        if len(f) and data.draw(st.booleans()):
            f.remove(f.exhausted(min_cost=bound / 10))
    g = IndividualRenyiFilter.from_dict(f.to_dict())
    np.testing.assert_array_equal(g.spent, f.spent)


def test_filter_state_rejects_corruption():
    f = IndividualRenyiFilter(order=4.0, bound=1.0)
    state = f.to_dict()
    state["spent"] = [0.5, 1.5]
    with pytest.raises(ValueError, match="outside"):
        IndividualRenyiFilter.from_dict(state)


def test_filter_select_keeps_the_chosen_records_in_order():
    f = IndividualRenyiFilter(order=4.0, bound=1.0)
    f.add(4)
    f.step(np.array([0.1, 0.2, 0.3, 0.4]))
    f.select([3, 1])
    np.testing.assert_allclose(f.spent, [0.4, 0.2])
    for bad in ([0, 0], [2], [[0]]):
        with pytest.raises(ValueError, match="index"):
            f.select(bad)


@settings(max_examples=100, deadline=None)
@given(clip=st.floats(0.01, 5.0), grid=st.integers(2, 600), seed=st.integers(0, 10**6))
def test_round_cost_lookup_never_undercharges(clip, grid, seed):
    """The arithmetic grid lookup equals a binary search for the first grid point >= |g|."""
    table = RoundCostTable(order=8.0, sigma_leaf=2.0, leaf_noise_split=0.1, sample_rate=0.2,
                           grad_clip=clip, grid=grid)
    rng = np.random.default_rng(seed)
    g = np.concatenate([rng.uniform(0, clip, 500), table.grid, np.nextafter(table.grid, 0),
                        np.nextafter(table.grid, np.inf), [clip, 2 * clip, 0.0]])
    capped = np.minimum(g, clip)
    idx = np.minimum(np.searchsorted(table.grid, capped, side="left"), grid - 1)
    np.testing.assert_array_equal(table.cost(g), table.table[idx])
    assert np.all(table.grid[idx] >= capped)
    # a signed gradient costs what its magnitude does (S-GBDT passes its clipped gradients)
    np.testing.assert_array_equal(table.cost(-g), table.table[idx])


@pytest.mark.parametrize("order", [1.5, 2.5, 8.0, 58.0])
@pytest.mark.parametrize("r1", [0.0, 0.2])
@pytest.mark.parametrize("q", [0.1, 1.0])
def test_round_cost_table_entries_are_the_exact_costs(order, r1, q):
    """The vectorised table is exact_cost at every grid point, bit for bit: a record whose |g|
    sits on a grid point (e.g. clipped to g*) is charged no less than its exact cost."""
    table = RoundCostTable(order=order, sigma_leaf=2.0, leaf_noise_split=r1, sample_rate=q,
                           grad_clip=0.5, grid=65)
    assert table.table.tolist() == [table.exact_cost(g) for g in table.grid]


def test_batched_subsampled_rdp_equals_one_order_at_a_time():
    from dpstream.accounting import rdp

    orders = np.concatenate([rdp.DEFAULT_ORDERS[::7], [1.01, 2.25, 33.3, 100.5, 2048.0]])
    for q, z in ((0.01, 0.7), (0.1, 11.756), (0.5, 3.0)):
        batch = rdp.subsampled_gaussian_rdp(orders, sample_rate=q, noise_multiplier=z)
        single = [rdp.subsampled_gaussian_rdp([a], sample_rate=q, noise_multiplier=z)[0]
                  for a in orders]
        assert batch.tolist() == single


def test_sgbdt_calibration_is_computed_once_per_budget():
    from dpstream.accounting import calibrate_sgbdt

    kw = dict(epsilon=0.5, delta=5e-8, sample_rate=0.1, rounds=40, grad_clip=0.5,
              leaf_noise_split=0.1)
    first = calibrate_sgbdt(**kw)
    assert calibrate_sgbdt(**{**kw, "rounds": np.int64(40), "epsilon": np.float64(0.5)}) is first
    assert calibrate_sgbdt(**{**kw, "rounds": 41}) != first


def test_compiled_cost_lookup_matches_the_numpy_lookup(monkeypatch):
    from dpstream.accounting import accountant

    table = RoundCostTable(order=8.0, sigma_leaf=2.0, leaf_noise_split=0.1, sample_rate=0.2,
                           grad_clip=0.7, grid=97)
    rng = np.random.default_rng(1)
    g = np.concatenate([rng.normal(0, 0.5, 3000), table.grid, -table.grid,
                        np.nextafter(table.grid, 0), np.nextafter(table.grid, np.inf), [9.0]])
    compiled = table.cost(g)
    monkeypatch.setattr(accountant, "_COMPILED", [None])
    np.testing.assert_array_equal(compiled, table.cost(g))
