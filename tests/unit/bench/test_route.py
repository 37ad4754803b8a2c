"""bench.route's figures from measured samples (pure), and its place among the benches."""

from __future__ import annotations

from bench import route
from bench.runner import BENCHES, REQUIRED


def test_figures_are_route_keys_and_every_required_one_is_reported() -> None:
    solo = {"lines": 100, "seconds": 40.0, "missing": 0, "per_worker": {"w0": 100},
            "builds_per_worker": [1]}
    spread = {"lines": 100, "seconds": 11.0, "missing": 0,
              "per_worker": {"w0": 26, "w1": 25, "w2": 25, "w3": 24},
              "builds_per_worker": [1, 1, 1, 0]}
    callers = {"idle": [260.0] * 20, "loaded": [270.0] * 99 + [380.0],
               "loaded_sent": 100, "shares": {"w0": 0.25, "w1": 0.3, "w2": 0.25, "w3": 0.2},
               "kill": [270.0] * 98 + [1300.0, 1900.0], "kill_sent": 100, "kill_lost": 0,
               "kill_duplicates": 3, "kill_failovers": 2}
    plain = {"lines": 100, "seconds": 16.0, "missing": 0,
             "per_worker": {"w0": 40, "w1": 20, "w2": 20, "w3": 20},
             "builds_per_worker": [0, 1, 1, 1], "spilled": 60}
    out = route.outcome(solo, spread, callers, plain)
    assert all(k.startswith("route_") for k in out.figures)
    assert {k for k in REQUIRED if k.startswith("route_")} <= set(out.figures)
    f = out.figures
    assert f["route_narrator_speedup"] == round(40 / 11, 2)
    assert f["route_narrator_max_builds_per_worker"] == 1
    assert f["route_brand_min_worker_share"] == 0.2
    p99 = f["route_brand_first_chunk_p99_ms"]
    assert p99 is not None and f["route_brand_p99_over_idle"] == round(p99 / 260, 2)
    assert f["route_kill_first_chunk_max_ms"] == 1900.0 and f["route_kill_lost"] == 0
    assert f["route_plain_narrator_speedup"] == 2.5 and f["route_plain_narrator_spilled"] == 60
    assert f["route_plain_narrator_workers_used"] == 4


def test_a_worker_that_answered_nothing_has_a_share_of_zero() -> None:
    callers = {"idle": [1.0], "loaded": [1.0], "loaded_sent": 1, "shares": {"w0": 1.0},
               "kill": [], "kill_sent": 0, "kill_lost": 0, "kill_duplicates": 0,
               "kill_failovers": 0}
    run = {"lines": 1, "seconds": 1.0, "missing": 0, "per_worker": {}, "builds_per_worker": [0],
           "spilled": 0}
    assert route.outcome(run, run, callers, run).figures["route_brand_min_worker_share"] == 0.0


def test_route_runs_before_peers_with_the_quick_plan_smaller() -> None:
    assert list(BENCHES)[-2:] == ["route", "peers"]
    quick, full = route.plan(True), route.plan(False)
    assert full["lines"] == 1000 and all(quick[k] <= full[k] for k in quick)
