"""bench.peersim: the peers trace's event simulation, checked against what its cost model
implies, so a routing comparison made with it rests on the model and not on a slip."""

from __future__ import annotations

import pytest

from bench.peersim import BASE_S, PER_ITEM_S, main, simulate


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
