"""The fuzz suite's generators, and the readers' decoders on what they generate (no server).

The integration suite (tests/integration/test_fuzz_topics.py) produces these records to the
real broker; here the same strategies go straight into each reader's decoding step, so a
decoder that raises something other than its documented error shows up in milliseconds.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzzgen import (
    FRAMING_BYTES,
    KINDS,
    LANES,
    Draft,
    FuzzRecord,
    Ids,
    TopicKind,
    control_strategy,
    drafts,
    draw,
    edge_drafts,
    expected_request_id,
    render,
    request_strategy,
    result_strategy,
)
from bench.fuzzrun import FuzzPlan
from consumers.aggregator.state import JobState, build_job, clip_texts, merge_result
from consumers.tracing import child_traceparent
from pipeline.subtitles import cues, render_srt
from topics.control import InvalidControl, decode_control
from topics.errors import MAX_MESSAGE_CHARS, InvalidRequest, UndecodableMessage
from topics.events import decode_result
from topics.validation import decode_request

pytestmark = pytest.mark.fuzz

LIMIT = 20_000  # a small broker limit keeps "just under the limit" cheap here
FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _render(draft: Draft, kind: TopicKind) -> FuzzRecord:
    return render(draft, kind, ids=Ids("t"), voice="narrator-1", limit=LIMIT)


@FAST
@given(request_strategy(), st.sampled_from(LANES))
def test_a_request_record_is_answered_as_the_oracle_says(draft: Draft, lane: TopicKind) -> None:
    """decode_request raises only its two errors; a rejection names the request exactly when
    expected_request_id does (then a result answers it, else the DLQ); messages stay short."""
    rec = _render(draft, lane)
    expected = expected_request_id(rec.value)
    try:
        request = decode_request(rec.value)
    except UndecodableMessage as exc:
        assert expected is None
        assert len(exc.message) <= MAX_MESSAGE_CHARS
    except InvalidRequest as exc:
        assert exc.request_id == expected
        assert len(exc.message) <= MAX_MESSAGE_CHARS
    else:
        assert request.request_id == expected
    child_traceparent(rec.headers)  # any header, null values included


@FAST
@given(control_strategy())
def test_a_control_record_is_a_command_or_skipped(draft: Draft) -> None:
    rec = _render(draft, "control")
    try:
        command = decode_control(rec.value)
    except InvalidControl:
        return
    assert (command.request_id is None) != (command.job_id is None)


@FAST
@given(st.lists(result_strategy(), min_size=1, max_size=6))
def test_results_merged_into_a_job_always_close(found: list[Draft]) -> None:
    """Whatever results a job gets, merging never raises and the job event, its timeline
    and subtitles can be built (a failure there is a close retried forever)."""
    states: dict[str, JobState] = {}
    for draft in found:
        rec = _render(draft, "results")
        try:
            result = decode_result(rec.value or b"")
        except (ValueError, RecursionError):  # what the aggregator skips (app.py)
            continue
        if result.job is None:
            continue
        merged = merge_result(states.get(result.job.id), result, 100.0)
        if merged.state is not None:
            states[result.job.id] = merged.state
    for state in states.values():
        event = build_job(state, manifest=None, gap_ms=300, completed_at="x")
        render_srt(cues(event.timeline, clip_texts(state, None)))
        assert all(math.isfinite(span.end_s) for span in event.timeline)
        assert len(event.missing) <= 10_000


@pytest.mark.parametrize("kind", KINDS)
def test_edge_records_sit_just_under_or_just_over_the_limit(kind: TopicKind) -> None:
    limit = 1_048_588
    for draft in edge_drafts(kind):
        rec = render(draft, kind, ids=Ids("t"), voice="narrator-1", limit=limit)
        if rec.over_limit:
            assert len(rec.value or b"") > limit
        elif draft.pad:
            assert limit - 4 * FRAMING_BYTES <= rec.size + FRAMING_BYTES <= limit


def test_drawing_is_reproducible_from_the_seed_and_differs_by_topic() -> None:
    assert draw(request_strategy(), 10, 7) == draw(request_strategy(), 10, 7)
    assert len(draw(request_strategy(), 10, 7)) == 10
    assert drafts("requests", 10, 3) != drafts("interactive", 10, 3)


def test_excluded_features_are_left_out() -> None:
    kept = drafts("requests", 30, 5, exclude=("null_header", "near_limit"))
    assert not any(d.features() & {"null_header", "near_limit"} for d in kept)
    with pytest.raises(ValueError, match="unknown fuzz features"):
        drafts("requests", 1, 1, exclude=("bogus",))


def test_the_oracle() -> None:
    assert expected_request_id(None) is None
    assert expected_request_id(b"\xff") is None
    assert expected_request_id(b'[{"request_id": "a"}]') is None
    assert expected_request_id(b'{"request_id": "a/b"}') is None
    assert expected_request_id(b'{"request_id": 7}') is None
    assert expected_request_id(b'{"request_id": "r-1", "text": 5}') == "r-1"


def test_the_plan_from_the_environment() -> None:
    plan = FuzzPlan.from_env(examples=40, environ={"VF_FUZZ_SEED": "9",
                                                  "VF_FUZZ_EXCLUDE": "deep, null_header"})
    assert (plan.examples, plan.seed, plan.exclude) == (40, 9, ("deep", "null_header"))
    assert FuzzPlan.from_env(examples=40, environ={"VF_FUZZ_EXAMPLES": "600"}).examples == 600
    with pytest.raises(ValueError, match="VF_FUZZ_EXCLUDE"):
        FuzzPlan.from_env(examples=1, environ={"VF_FUZZ_EXCLUDE": "nope"})
