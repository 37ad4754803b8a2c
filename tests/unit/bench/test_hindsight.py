"""bench.hindsight: the search for a first-sighting placement with the trace known, and the
check of that placement on other draws of the same voices."""

from __future__ import annotations

import re

import pytest

from bench.hindsight import (
    allowed_moves,
    held_out,
    homes,
    level_counts,
    lpt,
    main,
    moves_at_level,
    search,
)
from bench.peers import PROCESSES, TRACE_SEED
from bench.peersim import simulate


def test_lpt_puts_the_heaviest_voice_alone_and_evens_out_the_rest() -> None:
    weights = {"a": 10.0, "b": 4.0, "c": 4.0, "d": 3.0, "e": 3.0, "f": 2.0}
    placement = lpt(weights)
    assert set(placement) == set(weights)
    load = [0.0] * PROCESSES
    for voice, w in placement.items():
        load[w] += weights[voice]
    assert load[placement["a"]] == 10.0  # nobody joins the heaviest while lighter ones exist
    assert sorted(load) == [4.0, 6.0, 6.0, 10.0]


def test_a_placement_steers_first_sightings_and_changes_the_moves_at_the_level() -> None:
    own, p99 = moves_at_level(None, quick=True)
    everyone_on_one = {voice: 0 for voice in level_counts("load0.7", quick=True)}
    crowded, crowded_p99 = moves_at_level(everyone_on_one, quick=True)
    # the oracle still keeps nginx's p99 there, and pays for the crowding in moves
    assert crowded_p99 == pytest.approx(p99)
    assert crowded > own


def test_a_placement_steers_only_the_ideal_router() -> None:
    with pytest.raises(ValueError, match="placement and everywhere steer the ideal router"):
        simulate("fleet", quick=True, placement={"voice-0000": 1})


def test_homes_runs_each_rule_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    rows = homes(quick=True)
    assert [(r["rule"], r["first_sightings"]) for r in rows][:2] == [
        ("home queue 0", "least loaded"), ("home queue 0", "LPT by popularity")]
    assert len(rows) == 6
    one_call_ms = 300.0
    assert all(r["p99_70_ms"] >= one_call_ms - 0.5 and r["builds"] > 0 for r in rows)
    main(["--homes", "--quick"])
    assert "| wait <= 200 ms | LPT by popularity |" in capsys.readouterr().out


def test_the_search_never_gives_up_the_p99_and_its_placement_reproduces_its_moves() -> None:
    found = search(25, quick=True)
    assert found["moves"] <= found["start_moves"]
    steps = [moves for _, moves in found["trail"]]
    assert steps == sorted(steps, reverse=True) and steps[-1] == found["moves"]
    assert set(level_counts("load0.7", quick=True)) <= set(found["placement"])
    moves, p99 = moves_at_level(found["placement"], quick=True)
    assert moves == found["moves"] and p99 <= found["p99_bound_ms"] + 0.5
    assert search(25, quick=True) == found  # the same seed, the same walk


def test_other_seeds_draw_the_same_voices_in_another_order() -> None:
    here = level_counts("load0.7", quick=True)
    there = level_counts("load0.7", quick=True, seed=TRACE_SEED + 1)
    assert sum(here.values()) == sum(there.values())
    assert here != there
    rows = held_out({}, quick=True, seeds=(TRACE_SEED + 1,))
    assert [row["seed"] for row in rows] == [TRACE_SEED, TRACE_SEED + 1]
    # an empty placement is the oracle's own
    assert all(row["searched"] == row["oracle"] for row in rows)


def test_the_bar_leaves_43_moves_on_the_recorded_trace() -> None:
    # docs/benchmarks.md section 8: 0.6x least_conn's 834 builds, less 457 first sightings
    nginx = simulate("least_conn")
    assert (nginx["builds"], nginx["first_sightings"]) == (834, 457)
    assert allowed_moves() == 43
    quick = simulate("least_conn", quick=True)
    assert allowed_moves(quick=True) == int(0.6 * quick["builds"]) - quick["first_sightings"]


def test_the_cli_prints_the_bar_and_one_row_a_seed(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--iterations", "5", "--quick"])
    out = capsys.readouterr().out
    assert "builds: least_conn" in out and "| 16 (searched here) |" in out
    assert len(re.findall(r"^\| (?:17|18|19|20|21) \|", out, re.MULTILINE)) == 5
    with pytest.raises(SystemExit):
        main(["--iterations", "-1"])
    assert "--iterations must be 0 or more" in capsys.readouterr().err
