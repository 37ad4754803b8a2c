import pytest

from bench.stats import percentile, recovery_time, slope, summary


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert percentile(values, 50) == pytest.approx(5.5)
    # rank (10 - 1) * 0.99 = 8.91 -> 9 + 0.91 * (10 - 9)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile(list(reversed(values)), 25) == pytest.approx(3.25)


def test_percentile_of_one_value_is_that_value() -> None:
    assert percentile([7.5], 99) == 7.5


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_summary_names_the_tail() -> None:
    s = summary([float(i) for i in range(1, 101)])
    assert s == {"p50": 50.5, "p95": 95.05, "p99": 99.01, "mean": 50.5, "max": 100.0}


def test_slope_is_least_squares() -> None:
    assert slope([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == pytest.approx(2.0)
    assert slope([(0.0, 4.0), (1.0, 4.0)]) == 0.0
    assert slope([(1.0, 4.0)]) == 0.0
    assert slope([(1.0, 4.0), (1.0, 9.0)]) == 0.0


def test_recovery_time_needs_the_value_to_stay_down() -> None:
    series = [(0.0, 1.0), (1.0, 50.0), (2.0, 3.0), (2.5, 60.0), (3.0, 2.0), (4.0, 1.0),
              (5.5, 1.0)]
    # Below 5 at t=2.0 but not for 2 s; from t=3.0 it stays below through 5.5.
    assert recovery_time(series, fault_t=1.0, threshold=5.0, hold_s=2.0) == 2.0


def test_recovery_time_is_none_when_it_never_recovers() -> None:
    series = [(0.0, 1.0), (1.0, 50.0), (2.0, 40.0), (3.0, 30.0)]
    assert recovery_time(series, fault_t=1.0, threshold=5.0, hold_s=1.0) is None
