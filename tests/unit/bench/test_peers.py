from pathlib import Path
from typing import Any

import matplotlib
import pytest

from bench import peers
from bench.peerload import (
    ERROR,
    FAILED,
    OK,
    Answer,
    account,
    builds,
    profile_counts,
    spilled_count,
    throughput_at_p99,
    vf_path,
)

matplotlib.use("Agg")


def test_account_counts_lost_as_errors_and_silence_but_not_failed_answers() -> None:
    sent = {f"r{i}": 100.0 + i for i in range(6)}
    answers = {"r0": Answer(100.5, OK), "r1": Answer(101.2, OK), "r2": Answer(103.0, FAILED),
               "r3": Answer(110.0, ERROR, "502"), "r4": Answer(104.9, OK),
               "other": Answer(100.1, OK)}  # not of this row
    row = account(sent, answers)
    assert (row["sent"], row["ok"], row["failed"], row["errors"]) == (6, 3, 1, 1)
    assert row["unanswered"] == 1  # r5: no answer at all
    assert row["lost"] == 2  # r3 (error) and r5 (nothing); r2 was answered, failed
    assert row["throughput_rps"] == pytest.approx(3 / 4.9, abs=0.01)
    # Latencies of ok answers: 500, 200, 900 ms.
    assert row["p50_ms"] == 500.0
    assert row["p99_ms"] == pytest.approx(200 + (900 - 200) * 0.98 + 0, abs=15)


def test_account_of_nothing_answered() -> None:
    row = account({"a": 1.0}, {})
    assert (row["lost"], row["unanswered"], row["p99_ms"], row["throughput_rps"]) == (
        1, 1, None, 0.0)


def test_throughput_at_p99_takes_the_best_row_within_the_bound_and_nothing_lost() -> None:
    rows = [{"throughput_rps": 10.0, "p99_ms": 400.0, "lost": 0},
            {"throughput_rps": 15.0, "p99_ms": 900.0, "lost": 0},
            {"throughput_rps": 18.0, "p99_ms": 950.0, "lost": 3},
            {"throughput_rps": 20.0, "p99_ms": 3000.0, "lost": 0}]
    assert throughput_at_p99(rows, 1000.0) == 15.0
    assert throughput_at_p99(rows, 100.0) is None


def test_profile_counts_and_builds_from_metrics_text() -> None:
    text = ("# HELP vf_profile_cache_total Voice profile lookups by result\n"
            'vf_profile_cache_total{result="hit"} 90.0\n'
            'vf_profile_cache_total{result="store"} 8.0\n'
            'vf_profile_cache_total{result="miss"} 2.0\n'
            'vf_profile_cache_created{result="hit"} 1.7e9\n')
    after = profile_counts(text)
    assert after == {"hit": 90.0, "store": 8.0, "miss": 2.0}
    assert builds({"hit": 40.0, "store": 5.0, "miss": 2.0}, after) == {
        "lookups": 53, "builds": 3, "computed": 0, "hits": 50}


def test_spilled_count_sums_the_lanes_and_skips_the_created_series() -> None:
    text = ('vf_spilled_total{lane="batch"} 200.0\n'
            'vf_spilled_total{lane="interactive"} 3.0\n'
            'vf_spilled_created{lane="batch"} 1.7e9\n')
    assert spilled_count(text) == 203
    assert spilled_count("# nothing spilled yet\n") == 0


def test_both_designs_get_the_same_trace_and_the_plan_fits_quick_mode() -> None:
    a, b = peers.trace(50, "ng"), peers.trace(50, "vf")
    assert [(r.voice_id, r.text) for r in a] == [(r.voice_id, r.text) for r in b]
    assert a[0].request_id != b[0].request_id
    assert len({r.voice_id for r in peers.trace(2000, "x")}) > 300  # 1,000 voices, Zipf
    p = peers.plan(quick=True)
    parts = peers.slices(p)
    assert [name for name, _, _ in parts] == [
        "warm", "load0.5", "load0.7", "load0.9", "load1.1", "load1.3", "load1.5", "load1.7",
        "load2.0", "load2.5", "kill"]
    seconds = p["warm_s"] + len(p["loads"]) * p["level_s"] + p["kill_s"]
    assert seconds <= 60  # at most, sending per design; start-up and drains come on top
    assert parts[2][2] == round(0.7 * peers.NOMINAL_RPS * p["level_s"])
    assert peers.KILL_LOAD in p["loads"] and peers.KILL_LOAD in peers.plan(False)["loads"]


def _result(p99s: list[float], kill_lost: int) -> dict[str, Any]:
    rows = [{"name": f"load{x}", "load": x, "sent": 100, "ok": 100, "failed": 0, "lost": 0,
             "throughput_rps": round(x * peers.NOMINAL_RPS, 2), "p50_ms": p99 / 3,
             "p99_ms": p99} for x, p99 in zip((0.5, 0.7, 0.9), p99s, strict=True)]
    kill = {"name": "kill", "load": 0.7, "sent": 187, "ok": 187 - kill_lost, "failed": 0,
            "lost": kill_lost, "throughput_rps": 15.0, "p50_ms": 400.0, "p99_ms": 9000.0,
            "retried": 2, "duplicates": 3}
    return {"rows": rows, "kill": kill, "profiles": {"lookups": 300, "builds": 40,
                                                     "computed": 0, "hits": 260},
            "cpu_s": {"servers": 6.0, "nginx": 0.3, "workers": 4.5}}


def test_outcome_writes_the_peers_keys_a_table_and_a_plot() -> None:
    results = {"nginx": _result([500.0, 800.0, 2500.0], 0),
               "voicefactory": _result([400.0, 600.0, 900.0], 0)}
    out = peers.outcome(results, peers.plan(quick=True), vf_worker_lifetime_ms=25.0)
    f = out.figures
    assert f["peers_nginx_throughput_at_p99_rps"] == round(0.7 * peers.NOMINAL_RPS, 2)
    assert f["peers_vf_throughput_at_p99_rps"] == round(0.9 * peers.NOMINAL_RPS, 2)
    assert (f["peers_nginx_p99_ms_at_70"], f["peers_vf_p99_ms_at_70"]) == (800.0, 600.0)
    assert f["peers_nginx_profile_builds"] == 40
    assert f["peers_nginx_kill9_lost"] == 0 and f["peers_nginx_kill9_retried"] == 2
    assert f["peers_vf_kill9_duplicates"] == 3
    assert f["peers_nginx_cpu_ms_per_request"] == 20.0  # 6 s over 300 ok answers
    assert f["peers_nginx_proxy_cpu_ms_per_request"] == 1.0
    assert f["peers_vf_cpu_ms_per_request"] == 15.0
    assert f["peers_vf_worker_lifetime_cpu_ms_per_request"] == 25.0
    assert f["peers_vf_routes_home"] == 0 and "peers_nginx_routes_home" not in f
    assert all(k.startswith("peers_") for k in f)
    assert "| nginx |" in out.table and "| voicefactory |" in out.table
    assert any("non_idempotent" in n for n in out.notes)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        peers.plot(out.series, ax)
        assert len(ax.get_lines()) == 5  # p99 + p50 per design, and the bound
    finally:
        plt.close(fig)


def test_vf_path_splits_the_way_there_a_wait_for_a_slot_and_the_way_back() -> None:
    # (arrival, result produced at, timings): 97 straight through, 3 that waited at home
    answers = [(10.0 + i + 0.002, 10.0 + i, {"queued": 3.0, "synthesis": 300.0})
               for i in range(97)]
    answers += [(50.0 + i + 0.004, 50.0 + i, {"queued": 150.0 + i}) for i in range(3)]
    path = vf_path(answers)
    assert path["waited"] == 3  # queued over WAITED_MS; the Kafka hop alone is not a wait
    assert path["queued_p50_ms"] == 3.0 and path["queued_p99_ms"] == 151.0
    assert path["back_p50_ms"] == 2.0 and 2.0 <= path["back_p99_ms"] <= 4.0
    # a result the clock says came back before it was produced (two hosts' clocks) counts 0
    assert vf_path([(1.0, 1.5, {"queued": 1.0})])["back_p50_ms"] == 0.0
    assert vf_path([]) == {"queued_p50_ms": None, "queued_p99_ms": None,
                           "back_p50_ms": None, "back_p99_ms": None, "waited": 0}


def test_outcome_reports_the_vf_path_at_70_and_per_level() -> None:
    vf = _result([400.0, 600.0, 900.0], 0)
    for row in [*vf["rows"], vf["kill"]]:
        row["path"] = {"queued_p50_ms": 2.5 * row["load"], "queued_p99_ms": 200.0,
                       "back_p50_ms": 1.9, "back_p99_ms": 4.0, "waited": 7}
    out = peers.outcome({"nginx": _result([500.0, 800.0, 2500.0], 0), "voicefactory": vf},
                        peers.plan(quick=True))
    f = out.figures
    assert f["peers_vf_queued_p50_ms_at_70"] == 1.75 and f["peers_vf_waited_at_70"] == 7
    assert f["peers_vf_back_p99_ms_at_70"] == 4.0 and "peers_nginx_waited_at_70" not in f
    assert "waited for a slot" in out.table and "| 70% (kill run) |" in out.table
    # runs without the split (nginx's rows never have one) leave the keys null
    bare = peers.outcome({"nginx": _result([500.0, 800.0, 2500.0], 0),
                          "voicefactory": _result([400.0, 600.0, 900.0], 0)},
                         peers.plan(quick=True))
    assert bare.figures["peers_vf_waited_at_70"] is None
    assert "waited for a slot" not in bare.table


def test_route_reasons_sum_over_the_levels_whose_builds_are_counted() -> None:
    rows: list[dict[str, Any]] = [
        {"load": 0.5, "reasons": {"home": 50, "copy": 40, "moved": 2}},
        {"load": 1.1, "reasons": {"home": 30, "joined": 5, "moved": 1}},
        {"load": 1.3, "reasons": {"moved": 9}},  # past always_up_to: builds not counted
        {"load": 0.7}]  # a row from before reasons were kept
    reasons = peers.route_reasons(rows, up_to=1.1)
    assert reasons == {"peers_vf_routes_home": 80, "peers_vf_routes_copy": 40,
                       "peers_vf_routes_held": 0, "peers_vf_routes_joined": 5,
                       "peers_vf_routes_moved": 3, "peers_vf_routes_unrouted": 0}


def test_the_runner_knows_peers_and_always_writes_its_keys_and_the_cpu_figure() -> None:
    from bench.runner import BENCHES, REQUIRED, merge, select

    assert BENCHES["peers"] is peers
    assert select(["peers"]) == ["peers"]
    assert list(BENCHES)[-1] == "peers"  # last: it starts 8 processes of its own
    merged = merge([])
    for key in ("cpu_ms_per_request", "peers_nginx_throughput_at_p99_rps",
                "peers_vf_throughput_at_p99_rps", "peers_nginx_p99_ms_at_70",
                "peers_vf_p99_ms_at_70", "peers_nginx_profile_builds",
                "peers_vf_profile_builds", "peers_nginx_kill9_lost", "peers_vf_kill9_lost"):
        assert key in REQUIRED and merged[key] is None
    results = {"nginx": _result([500.0, 800.0, 2500.0], 0),
               "voicefactory": _result([400.0, 600.0, 900.0], 0)}
    figures = peers.outcome(results, peers.plan(quick=True)).figures
    assert {k for k in REQUIRED if k.startswith("peers_")} <= set(figures)


def test_cli_bench_peers_runs_only_the_peers_measurement(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bench.runner
    import voicefactory

    seen: dict[str, Any] = {}

    def fake_main(settings: Any, **kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr(bench.runner, "main", fake_main)
    args = voicefactory.build_parser().parse_args(
        ["bench", "peers", "--quick", "--work-dir", str(tmp_path)])
    assert args.suite == "peers"
    assert voicefactory.cmd_bench(args) == 0
    assert seen["only"] == ["peers"] and seen["quick"] is True
    args = voicefactory.build_parser().parse_args(["bench", "--only", "peers", "faults"])
    assert args.only == ["peers", "faults"]


def test_levels_past_nominal_go_on_only_while_the_p99_bound_holds() -> None:
    """Each design rises past 110 % until its p99 passes the bound; the kill run's slice of
    the trace is the same whichever levels ran."""
    import asyncio

    from bench.peerload import throughput_at_p99

    p = peers.plan(quick=True)
    capacity = {"nginx": 1.0, "voicefactory": 1.6}  # load at which p99 passes the bound
    seen: dict[str, list[tuple[float, str]]] = {}

    def run(design: str) -> dict[str, Any]:
        trace = peers.trace(sum(c for _, _, c in peers.slices(p)), design)

        async def send(part: list[Any], rate: float, **kill: Any) -> dict[str, Any]:
            load = rate / peers.NOMINAL_RPS
            seen.setdefault(design, []).append((round(load, 2), part[0].voice_id))
            p99 = 400.0 if load <= capacity[design] else 3000.0
            return {"sent": len(part), "ok": len(part), "failed": 0, "lost": 0,
                    "throughput_rps": rate, "p50_ms": 300.0, "p99_ms": p99}

        return asyncio.run(peers._levels(p, trace, send, lambda: None, [], {}))

    nginx, vf = run("nginx"), run("voicefactory")
    assert [r["load"] for r in nginx["rows"]] == [0.5, 0.7, 0.9, 1.1]
    assert [r["load"] for r in vf["rows"]] == [0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7]
    assert seen["nginx"][-1] == seen["voicefactory"][-1]  # same kill slice, same voices
    assert throughput_at_p99(vf["rows"], peers.P99_BOUND_MS) == round(
        1.5 * peers.NOMINAL_RPS, 10)


def test_another_trace_seed_draws_another_order_and_the_default_is_the_recorded_one() -> None:
    recorded = [r.voice_id for r in peers.trace(300, "x")]
    assert recorded == [r.voice_id for r in peers.trace(300, "x", peers.TRACE_SEED)]
    assert recorded != [r.voice_id for r in peers.trace(300, "x", peers.TRACE_SEED + 1)]
