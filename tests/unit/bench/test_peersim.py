"""bench.peersim: the peers trace's event simulation, checked against what its cost model
implies, so a routing comparison made with it rests on the model and not on a slip."""

from __future__ import annotations

import pytest

from bench.peersim import BASE_S, PER_ITEM_S, _Run, frontier, main, simulate
from bench.workload import voice_id


def levels(out: dict[str, object]) -> dict[str, dict[str, float]]:
    return {lv["level"]: lv for lv in out["levels"]}  # type: ignore[attr-defined]


def test_least_conn_below_nominal_load_never_queues_and_past_it_saturates() -> None:
    out = simulate("least_conn", quick=True, max_load=1.1)
    by = levels(out)
    one_call_ms = (BASE_S + PER_ITEM_S) * 1000
    for name in ("load0.5", "load0.7", "load0.9"):  # paced arrivals, 8 slots: no wait
        assert by[name]["p99_ms"] == pytest.approx(one_call_ms)
    assert by["load1.1"]["p99_ms"] > 2 * one_call_ms  # 8 unbatched slots carry 26.7/s
    assert out["builds"] >= out["first_sightings"] > 0


def test_fleet_routing_builds_fewer_profiles_and_batches_past_nominal_load() -> None:
    nginx = simulate("least_conn", max_load=1.1)
    fleet = simulate("fleet", max_load=1.1)
    assert fleet["first_sightings"] == nginx["first_sightings"]  # the same trace
    assert fleet["builds"] < 0.65 * nginx["builds"]
    assert levels(fleet)["load1.1"]["p99_ms"] < levels(nginx)["load1.1"]["p99_ms"] / 2


def test_home_queue_zero_trades_builds_for_waiting() -> None:
    waits = simulate("fleet", max_load=0.7, home_queue=6)
    moves = simulate("fleet", max_load=0.7, home_queue=0)
    assert levels(moves)["load0.7"]["p99_ms"] < levels(waits)["load0.7"]["p99_ms"]
    assert moves["builds"] > waits["builds"]


def test_an_unknown_design_is_refused_and_the_cli_prints_every_level(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="least_conn, fleet, ideal"):
        simulate("round_robin")
    main(["--quick", "--max-load", "0.7"])
    out = capsys.readouterr().out
    assert "first sightings" in out and "load0.7" in out and "load0.9" not in out


def test_mixing_voices_in_a_call_carries_loads_that_one_voice_calls_cannot() -> None:
    mixed = levels(simulate("fleet", max_load=1.5))
    one_voice = levels(simulate("fleet", max_load=1.5, mix=False))
    # Tail voices never have company of their own voice: only mixed calls batch them.
    assert mixed["load1.5"]["p99_ms"] < 1000 < one_voice["load1.5"]["p99_ms"]
    assert mixed["load0.7"]["p99_ms"] == one_voice["load0.7"]["p99_ms"]  # slots free: alone


def test_the_ideal_router_moves_only_when_every_holder_is_full_and_a_slot_is_free() -> None:
    nginx = simulate("least_conn", max_load=0.7)
    ideal = simulate("ideal", max_load=0.7, home_queue=0)
    by = levels(ideal)
    one_call_ms = (BASE_S + PER_ITEM_S) * 1000
    for name in ("load0.3", "load0.5", "load0.7"):  # a slot free somewhere: nobody waits
        assert by[name]["p99_ms"] == pytest.approx(one_call_ms)
    assert ideal["first_sightings"] == nginx["first_sightings"]
    assert ideal["first_sightings"] < ideal["builds"] < nginx["builds"]
    # Waiting at home instead never moves more, and never waits less.
    patient = simulate("ideal", max_load=0.7, home_queue=6)
    assert patient["builds"] <= ideal["builds"]
    assert levels(patient)["load0.7"]["p99_ms"] > one_call_ms


def test_a_wait_budget_trades_the_ideal_routers_moves_for_waits_of_at_most_that_long() -> None:
    one_call_ms = (BASE_S + PER_ITEM_S) * 1000
    never = simulate("ideal", max_load=0.7, wait_ms=0)
    short = simulate("ideal", max_load=0.7, wait_ms=100)
    always = simulate("ideal", max_load=0.7, wait_ms=one_call_ms)
    assert always["builds"] == always["first_sightings"]  # a slot always frees in one call
    assert never["builds"] > short["builds"] > always["builds"]
    p99 = [levels(r)["load0.7"]["p99_ms"] for r in (never, short, always)]
    assert p99[0] == pytest.approx(one_call_ms)
    assert p99[0] < p99[1] <= one_call_ms + 100 < p99[2]
    with pytest.raises(ValueError, match="design must be ideal"):
        simulate("fleet", wait_ms=50)
    with pytest.raises(ValueError, match="design must be ideal"):
        simulate("least_conn", moves_at="load0.7")
    with pytest.raises(ValueError, match=r"moves_at must name a level of the run \(.*load0\.7"):
        simulate("ideal", moves_at="70%")


def test_the_frontier_has_no_wait_budget_with_nginxs_p99_at_70_and_0_6x_its_builds(
        capsys: pytest.CaptureFixture[str]) -> None:
    # docs/benchmarks.md section 8 rests on this: on the peers trace, the model gives no
    # rule of the kind "wait up to W ms where the profile is" both bars of issue 20 item 3.
    out = frontier(max_load=1.1)
    nginx = out["least_conn"]
    p99_nginx = levels(nginx)["load0.7"]["p99_ms"]
    both = [r["wait_ms"] for r in out["ideal"]
            if levels(r)["load0.7"]["p99_ms"] <= p99_nginx
            and r["builds"] <= 0.6 * nginx["builds"]]
    assert both == []
    assert any(levels(r)["load0.7"]["p99_ms"] <= p99_nginx for r in out["ideal"])
    assert any(r["builds"] <= 0.6 * nginx["builds"] for r in out["ideal"])
    # Nor does an oracle told which level is measured: it keeps nginx's p99 there by moving
    # whenever a holder is full, never moves elsewhere, and the moves at 70 % alone cost
    # more than the bar allows beyond the first sightings.
    oracle = out["oracle"]
    assert levels(oracle)["load0.7"]["p99_ms"] <= p99_nginx
    assert levels(oracle)["load0.5"]["p99_ms"] > p99_nginx  # it does wait elsewhere
    assert oracle["builds"] > 0.6 * nginx["builds"]
    assert sum(lv["moved"] for lv in oracle["levels"] if lv["level"] != "load0.7") == 0
    main(["--frontier", "--quick", "--max-load", "0.7"])
    table = capsys.readouterr().out
    assert "| ideal, wait <= 100 ms |" in table and "p99 at 70%" in table
    assert "| ideal, moves only at 70% |" in table


def test_the_cli_refuses_a_wait_budget_for_a_real_router(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--wait-ms", "50"])
    assert "add --design ideal" in capsys.readouterr().err


def test_voices_held_everywhere_go_to_the_least_loaded_process_even_with_a_holder_free() -> None:
    hot = voice_id(0)
    for everywhere, expected in ((frozenset(), 0), (frozenset({hot}), 1)):
        run = _Run("ideal", {}, None, ideal=0, wait_ms=0.0, everywhere=everywhere)
        run.procs[0].cache[hot] = None
        run.inflight[:] = [1, 0, 0, 0]  # the holder has a slot free
        assert run.ideal_pick(hot, 0) == expected


def test_holding_the_hottest_voices_everywhere_meets_no_builds_bar_once_counted() -> None:
    # docs/benchmarks.md section 8: replicating the top K voices to every process, each
    # build counted when it happens, leaves item 3's builds bar missed for the ideal router
    # that moves at every level and for the oracle that moves only at 70 %.
    nginx = simulate("least_conn", max_load=1.1)
    bar, p99_nginx = 0.6 * nginx["builds"], levels(nginx)["load0.7"]["p99_ms"]
    for k in (10, 30, 100):
        anywhere = simulate("ideal", max_load=1.1, wait_ms=0.0, everywhere=k)
        oracle = simulate("ideal", max_load=1.1, wait_ms=0.0, moves_at="load0.7",
                          everywhere=k)
        # the p99 bar is met (no wait at 70 %): the builds are what misses
        assert levels(anywhere)["load0.7"]["p99_ms"] <= p99_nginx
        assert levels(oracle)["load0.7"]["p99_ms"] <= p99_nginx
        assert anywhere["builds"] > bar and oracle["builds"] > bar, (k, anywhere["builds"],
                                                                     oracle["builds"])
    with pytest.raises(ValueError, match="design must be ideal"):
        simulate("fleet", everywhere=10)


def test_the_cli_refuses_everywhere_for_a_real_router_or_below_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--everywhere", "10"], ["--design", "ideal", "--everywhere", "-1"]):
        with pytest.raises(SystemExit):
            main(argv)
    err = capsys.readouterr().err
    assert "add --design ideal" in err and "--everywhere must be 0 or more" in err
