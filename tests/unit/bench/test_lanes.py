import math

import matplotlib
import msgspec
import pytest

from bench import lanes
from bench.lanefigures import (
    STAGES,
    Sample,
    backlog_for,
    engine_bound_rps,
    lane_figures,
    lane_requests,
    lane_text,
    paced_requests,
    rate_in,
    verdicts,
)
from bench.outcome import Outcome
from bench.runner import BENCHES, REQUIRED, merge
from bench.stats import percentile
from bench.streams import StreamSeen
from bench.workload import TEXT_CHARS
from pipeline.frontend import prepare
from topics.events import SynthesisRequest, encode

matplotlib.use("Agg")


# -- the schedule -------------------------------------------------------------------------

def test_lane_texts_reach_the_engine_unchanged_so_every_clip_has_one_length() -> None:
    texts = [lane_text(i) for i in (0, 1, 25, 26, 9_999, 26**8 - 1)]
    assert len(set(texts)) == len(texts)
    for text in texts:
        assert len(text) == TEXT_CHARS
        assert prepare(text, language="en", instruct=None).sentences == [text]
    with pytest.raises(ValueError):
        lane_text(26**8)


def test_paced_requests_cycle_the_voices_with_unique_ids_and_carry_the_stream_flag() -> None:
    voices = ["a", "b", "c"]
    reqs = paced_requests(2.0, 10.0, voices, prefix="ia", tag="t", stream=True)
    assert len(reqs) == 20  # 2/s for 10 s: Load.paced sends request i at i / 2 s
    assert len({r.request_id for r in reqs}) == 20
    assert [r.voice_id for r in reqs[:4]] == ["a", "b", "c", "a"]
    assert all(r.stream for r in reqs)
    wire = msgspec.json.decode(encode(reqs[0]), type=SynthesisRequest)
    assert wire.stream is True  # on the wire, not only in memory
    assert not any(r.stream for r in lane_requests(3, voices, prefix="bl", tag="t"))
    assert len(paced_requests(2.0, 0.1, voices, prefix="ia", tag="t")) == 1
    with pytest.raises(ValueError):
        paced_requests(0, 10, voices, prefix="ia", tag="t")


def test_the_engine_bound_and_a_backlog_that_outlasts_the_window() -> None:
    # Two engine calls at once, 100 ms per second of audio, 1-s clips: 20 answers a second.
    assert engine_bound_rps(2, 100.0, 1.0) == 20.0
    assert engine_bound_rps(4, 100.0, 0.5) == 80.0
    lines = backlog_for(20.0, 15.0, 1.5)
    assert lines == 450
    assert lines / engine_bound_rps(2, 100.0, 1.0) > 15.0  # still queued when it closes
    assert backlog_for(20.0, 15.0, 1.01) == math.ceil(20 * 15 * 1.01)
    with pytest.raises(ValueError):
        backlog_for(20.0, 15.0, 1.0)
    with pytest.raises(ValueError):
        engine_bound_rps(0, 100.0, 1.0)


# -- figures from samples -----------------------------------------------------------------

def test_a_sample_is_arrival_minus_send_and_counts_the_unanswered() -> None:
    sent = {"a": 10.0, "b": 11.0, "c": 12.0}
    sample = Sample.of(["a", "b", "c"], sent, {"a": 10.25, "b": 11.5})
    assert sample.answered_ms == [250.0, 500.0]
    assert sample.unanswered == 1 and sample.count == 3


def test_stages_come_from_the_answers_timings_and_publish_is_the_rest() -> None:
    sent = {"a": 0.0, "b": 0.0, "c": 0.0}
    timings = {"a": {"queued": 5.0, "profile": 700.0, "synthesis": 100.0, "encode": 1.0,
                     "upload": 4.0, "total": 810.0},
               "b": {"queued": 3.0, "synthesis": 100.0, "total": 103.0}}
    sample = Sample.of(["a", "b", "c"], sent, {"a": 0.82, "b": 0.11}, timings)
    assert sample.stages["profile"] == [700.0, 0.0]  # a stage not reported counts as 0
    assert [round(v, 6) for v in sample.stages["publish"]] == [10.0, 7.0]
    cells = dict(zip(STAGES, sample.stage_cells(), strict=True))
    assert cells["synthesis"] == "100.0 / 100.0"
    assert cells["queued"] == "4.0 / 5.0"  # p99 of 3 and 5: 4.98
    assert Sample([], unanswered=3).stage_cells() == ["-"] * len(STAGES)


def test_percentiles_match_the_stats_module_when_all_are_answered() -> None:
    values = [float(v) for v in (120, 80, 95, 400, 101, 99, 130, 87, 88, 250)]
    sample = Sample(values)
    for q in (0, 50, 95, 99, 100):
        assert sample.percentile(q) == round(percentile(values, q), 2)


def test_a_percentile_among_the_unanswered_is_none_not_a_number() -> None:
    sample = Sample([100.0] * 39, unanswered=1)  # 40 requests, one never answered
    assert sample.percentile(50) == 100.0
    assert sample.percentile(99) is None  # rank 38.61 needs the 40th: longer than the wait
    # 101 requests: rank 99 is the 100th, the slowest answered one.
    assert Sample([float(i) for i in range(100)], unanswered=1).percentile(99) == 99.0
    assert Sample([], unanswered=40).percentile(50) is None
    assert Sample().percentile(99) is None
    with pytest.raises(ValueError):
        Sample([1.0]).percentile(101)


def test_rate_in_counts_a_half_open_window() -> None:
    times = [0.5, 1.0, 1.5, 2.0, 2.9, 3.0, 7.0]
    assert rate_in(times, 1.0, 3.0) == 2.0  # 1.0, 1.5, 2.0, 2.9 over 2 s
    assert rate_in([], 0.0, 10.0) == 0.0
    with pytest.raises(ValueError):
        rate_in(times, 3.0, 3.0)


def test_lane_figures_ratio_share_and_first_chunk_overhead() -> None:
    # 100 requests each: p99 is rank 98.01, 1 % of the way from the 99th to the 100th.
    idle = Sample([100.0] * 98 + [100.0, 200.0])
    loaded = Sample([150.0] * 98 + [150.0, 260.0])
    first = Sample([210.0] * 98 + [220.0, 320.0])
    f = lane_figures(idle, loaded, first, solo_rps=18.0, loaded_rps=16.2,
                     first_chunk_cost_ms=200.0)
    assert f["lanes_interactive_idle_p99_ms"] == 101.0
    assert f["lanes_interactive_loaded_p99_ms"] == 151.1
    assert f["lanes_interactive_p99_ratio"] == round(151.1 / 101.0, 3) == 1.496
    assert f["lanes_batch_share"] == 0.9
    assert f["first_chunk_p50_ms"] == 210.0
    assert f["first_chunk_p99_ms"] == 221.0
    assert f["first_chunk_overhead_p99_ms"] == 21.0
    assert [row[3] for row in verdicts(f)] == ["met", "met", "met"]


def test_unanswered_lanes_give_none_figures_and_not_measured_verdicts() -> None:
    """Today's main: nothing reads the interactive lane, so nothing but batch is a number."""
    none = Sample([], unanswered=40)
    f = lane_figures(none, Sample([], unanswered=30), Sample([], unanswered=20),
                     solo_rps=8.0, loaded_rps=6.0, first_chunk_cost_ms=200.0)
    for key in ("lanes_interactive_idle_p99_ms", "lanes_interactive_loaded_p99_ms",
                "lanes_interactive_p99_ratio", "first_chunk_p50_ms", "first_chunk_p99_ms",
                "first_chunk_overhead_p99_ms"):
        assert f[key] is None
    assert f["lanes_batch_share"] == 0.75
    assert f["lanes_interactive_idle_unanswered"] == 40
    rows = verdicts(f)
    assert [row[3] for row in rows] == ["not measured", "missed", "not measured"]
    slow = lane_figures(Sample([100.0] * 10), Sample([400.0] * 10), Sample([260.0] * 10),
                        solo_rps=0.0, loaded_rps=5.0, first_chunk_cost_ms=200.0)
    assert slow["lanes_batch_share"] is None  # no solo rate: no share
    assert [row[3] for row in verdicts(slow)] == ["missed", "not measured", "missed"]


# -- the outcome, the runner's keys, the plot ---------------------------------------------

def _outcome(idle: Sample, loaded: Sample, first: Sample) -> Outcome:
    solo = {"queued_at_start": 375, "left_at_end": 200, "rps": 8.0, "answers": [3.2, 3.4]}
    mixed = {"queued_at_start": 450, "left_at_end": 337, "rps": 6.75, "answers": [3.1],
             "e2e": loaded}
    streams = [StreamSeen(first_audio=1.0, chunks=5, pcm_bytes=48_000, sample_rate=24_000,
                          attempts={"a1"}, final_at=1.8, status="succeeded")]
    return lanes.outcome(lanes.QUICK, 20.0, idle, idle, first, solo, mixed, streams, 0,
                         ["idle: no answer within 10 s ..."])


def test_the_outcome_names_every_required_lanes_key_and_draws(tmp_path: object) -> None:
    import matplotlib.pyplot as plt

    nothing = _outcome(Sample([], 40), Sample([], 30), Sample([], 20))
    lane_keys = [k for k in REQUIRED if k.startswith(("lanes_", "first_chunk_"))]
    assert len(lane_keys) == 9
    assert set(lane_keys) <= set(nothing.figures)
    assert all(nothing.figures[k] is None for k in lane_keys
               if k not in ("lanes_batch_solo_rps", "lanes_batch_loaded_rps",
                            "lanes_batch_share"))
    assert "0 of 40 (wait 10 s)" in nothing.table and "not measured" in nothing.table
    assert any("1 final records `succeeded`" in n for n in nothing.notes)
    merged = merge([nothing])
    assert merged["lanes_batch_solo_rps"] == 8.0 and merged["capacity_rps"] is None
    some = _outcome(Sample([120.0, 130.0]), Sample([140.0, 150.0]), Sample([210.0, 220.0]))
    for outcome in (nothing, some):
        fig, ax = plt.subplots()
        lanes.plot(outcome.series, ax)
        assert len(fig.axes) == 2
        plt.close(fig)


def test_lanes_is_registered_before_peers() -> None:
    assert BENCHES["lanes"] is lanes
    assert list(BENCHES)[-4:] == ["lanes", "gateway", "route", "peers"]


def test_the_engine_is_configured_as_the_issue_says() -> None:
    assert lanes.ENGINE["VF_BENCH_FIRST_CHUNK_MS"] == "200.0"
    assert lanes.ENGINE["VF_BENCH_PER_AUDIO_SECOND_MS"] == "100.0"  # RTF 0.1
    assert float(lanes.ENGINE["VF_BENCH_SECONDS_PER_CHAR"]) * TEXT_CHARS == 1.0
    assert lanes.FULL.mixed_backlog == 10_000
    assert lanes.RATE == 2.0
