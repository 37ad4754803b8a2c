"""Merging results into a job: order-free, idempotent, one clip per index."""

from __future__ import annotations

import itertools
import random

import msgspec
import pytest

from consumers.aggregator.state import (
    JobManifest,
    JobState,
    ManifestLine,
    build_job,
    decode_manifest,
    decode_state,
    emitted_marker,
    encode_manifest,
    encode_state,
    job_status,
    merge,
    merge_result,
    needs_opening,
    open_version,
    ready,
)
from topics.events import AudioRef, ErrorInfo, JobRef, Status, SynthesisResult, encode


def result(index: int, total: int = 3, status: Status = "succeeded", job: str = "ep1",
           duration: float = 1.0, request_id: str | None = None,
           text: str | None = None) -> SynthesisResult:
    rid = request_id or f"{job}-{index:04d}"
    audio = AudioRef(bucket="b", key=f"audio/2031/01/01/{rid}.wav", url="http://x",
                     format="wav", sample_rate=24000, duration_s=duration, bytes=100,
                     sha256="0" * 64) if status == "succeeded" else None
    error = None if audio else ErrorInfo(code="engine_error", message="boom")
    return SynthesisResult(request_id=rid, voice_id=f"v{index % 2}", status=status,
                           completed_at="2031-01-01T00:00:00Z", audio=audio, error=error,
                           job=JobRef(id=job, index=index, total=total),
                           metadata={"text": text} if text else None)


def fold(results: list[SynthesisResult], now: float = 100.0) -> JobState | None:
    state: JobState | None = None
    for r in results:
        state = merge(state, r, now) or state
    return state


def test_any_arrival_order_gives_the_same_clips_in_index_order() -> None:
    results = [result(i, total=4, duration=1 + i / 10) for i in range(4)]
    jobs = set()
    for order in itertools.permutations(results):
        state = fold(list(order))
        assert state is not None and state.complete
        job = build_job(state, manifest=None, gap_ms=500, completed_at="t")
        assert [c.index for c in job.clips] == [0, 1, 2, 3]
        assert job.timeline[-1].end_s == pytest.approx(1.0 + 1.1 + 1.2 + 1.3 + 3 * 0.5)
        jobs.add(encode(job))
    assert len(jobs) == 1  # all 24 orders give the same event, byte for byte


def test_duplicates_never_double_a_clip() -> None:
    rng = random.Random(7)
    stream = [result(i, total=5) for i in range(5)] * 3
    rng.shuffle(stream)
    state = fold(stream)
    assert state is not None
    assert sorted(state.clips) == [0, 1, 2, 3, 4]
    assert len(build_job(state, manifest=None, gap_ms=0, completed_at="t").clips) == 5


def test_a_success_is_never_replaced_and_a_failure_is() -> None:
    state = fold([result(0, total=2, status="failed"), result(0, total=2)])
    assert state is not None and state.clips[0].status == "succeeded"
    state = merge(state, result(0, total=2, status="failed"), 101.0)
    assert state is not None and state.clips[0].status == "succeeded"
    assert state.last_seen == 101.0  # a duplicate still counts as a sign of life


def test_results_outside_a_job_or_its_range_change_nothing() -> None:
    plain = SynthesisResult(request_id="r", voice_id="v", status="succeeded",
                            completed_at="t")
    assert merge(None, plain, 1.0) is None
    assert merge(None, result(3, total=3), 1.0) is None
    assert merge(None, result(0, job="../etc"), 1.0) is None  # would escape jobs/{id}/
    state = fold([result(0, total=2)])
    assert merge(state, result(2, total=5), 1.0) is None  # disagrees on total, out of range
    grown = merge(state, result(1, total=5), 1.0)  # disagrees on total, but fits
    assert grown is not None and grown.total == 2 and grown.complete


def test_an_emitted_job_ignores_late_duplicates() -> None:
    state = fold([result(i) for i in range(3)])
    assert state is not None
    marker = emitted_marker(state, "succeeded", now=200.0)
    assert marker.clips == {} and marker.emitted and marker.status == "succeeded"
    assert merge(marker, result(1), 300.0) is None
    assert not ready(marker, now=10_000.0, timeout_s=1.0)


def test_each_result_says_what_it_did_to_its_job() -> None:
    """The outcomes behind vf_job_results_total, one stream through every branch."""
    plain = SynthesisResult(request_id="r", voice_id="v", status="succeeded",
                            completed_at="t")
    stream = [(plain, "no_job"), (result(0, job="a/b"), "invalid"),
              (result(3, total=3), "invalid"), (result(0), "merged"),
              (result(1, status="failed"), "merged"), (result(1, status="expired"), "replaced"),
              (result(1), "replaced"), (result(1), "duplicate"),
              (result(1, request_id="other"), "duplicate"),
              (result(2, total=2), "invalid"),  # disagrees on total and out of its range
              (result(2, total=5), "merged")]  # disagrees on total, but fits
    state: JobState | None = None
    outcomes = []
    for r, _ in stream:
        step = merge_result(state, r, 100.0)
        outcomes.append(step.outcome)
        assert step.state == merge(state, r, 100.0)  # merge is merge_result's state
        state = step.state or state
    assert outcomes == [want for _, want in stream]
    assert state is not None and state.complete
    marker = emitted_marker(state, "succeeded", now=200.0)
    assert merge_result(marker, result(0), 300.0) == (None, "late")


def test_ready_when_complete_or_silent_for_the_timeout_counted_from_the_restart() -> None:
    partial = fold([result(0)], now=100.0)
    assert partial is not None
    assert not ready(partial, now=159.0, timeout_s=60)
    assert ready(partial, now=160.0, timeout_s=60)
    # restarted at 150: results may still be unread, so silence counts from then
    assert not ready(partial, now=160.0, timeout_s=60, not_before=150.0)
    assert ready(partial, now=210.0, timeout_s=60, not_before=150.0)
    complete = fold([result(i) for i in range(3)], now=100.0)
    assert complete is not None and ready(complete, now=100.0, timeout_s=60)


def test_status_succeeded_partial_failed() -> None:
    ok = fold([result(i) for i in range(3)])
    some = fold([result(0), result(1, status="failed"), result(2)])
    timed_out = fold([result(0)])
    none = fold([result(i, status="rejected") for i in range(3)])
    assert ok and some and timed_out and none
    assert [job_status(s) for s in (ok, some, timed_out, none)] == [
        "succeeded", "partial", "partial", "failed"]


def test_the_job_event_lays_out_only_clips_with_audio_and_lists_missing_lines() -> None:
    state = fold([result(0, total=4, duration=2.0), result(1, total=4, status="failed"),
                  result(3, total=4, duration=1.0)])
    assert state is not None
    job = build_job(state, manifest=None, gap_ms=250, completed_at="t",
                    subtitles="s3://b/jobs/ep1/subtitles.srt")
    assert job.status == "partial" and job.missing == [2]
    assert [c.index for c in job.clips] == [0, 1, 3]
    assert [(s.index, s.start_s, s.end_s) for s in job.timeline] == [(0, 0.0, 2.0),
                                                                      (3, 2.25, 3.25)]
    assert job.clips[1].error is not None and job.clips[1].duration_s == 0.0
    assert job.duration_s == 3.25
    assert job.gap_ms == 250  # the gap between spans 0 and 3, said rather than derived


def test_texts_come_from_the_script_else_from_result_metadata() -> None:
    state = fold([result(0, total=2, text="from metadata"), result(1, total=2, text="meta 1")])
    assert state is not None
    no_script = build_job(state, manifest=None, gap_ms=0, completed_at="t")
    assert [c.text for c in no_script.clips] == ["from metadata", "meta 1"]
    manifest = JobManifest(job_id="ep1", total=2, created_at="t", lines=[
        ManifestLine(index=0, request_id="ep1-0000", voice_id="v0", text="from the script")])
    mixed = build_job(state, manifest=manifest, gap_ms=0, completed_at="t")
    assert [c.text for c in mixed.clips] == ["from the script", "meta 1"]


def test_state_and_manifest_survive_their_json_round_trip() -> None:
    state = fold([result(2, duration=0.5), result(0)])
    assert state is not None
    again = decode_state(encode_state(state))
    assert again == state and sorted(again.clips) == [0, 2]
    manifest = JobManifest(job_id="j", total=1, created_at="t", gap_ms=120, concat=True,
                           lines=[ManifestLine(index=0, request_id="j-0000", voice_id="v",
                                               text="你好")])
    assert decode_manifest(encode_manifest(manifest)) == manifest


def test_a_job_cancelled_wholesale_is_complete_at_once_and_failed_with_its_lines_marked() -> None:
    state = fold([result(i, total=3, status="cancelled") for i in range(3)])
    assert state is not None and state.complete
    assert ready(state, now=100.0, timeout_s=600.0)  # no waiting for the timeout
    job = build_job(state, manifest=None, gap_ms=300, completed_at="t")
    assert job.status == "failed" and job.missing == [] and job.timeline == []
    assert [c.status for c in job.clips] == ["cancelled"] * 3
    assert all(c.audio is None and c.error is not None for c in job.clips)


def test_lines_finished_before_the_cancel_keep_their_audio_and_the_job_is_partial() -> None:
    state = fold([result(0, duration=2.0), result(1, status="cancelled"),
                  result(2, status="cancelled")])
    assert state is not None and state.complete
    job = build_job(state, manifest=None, gap_ms=300, completed_at="t")
    assert job.status == "partial"
    assert [(c.index, c.status) for c in job.clips] == [(0, "succeeded"), (1, "cancelled"),
                                                        (2, "cancelled")]
    assert [(s.index, s.start_s, s.end_s) for s in job.timeline] == [(0, 0.0, 2.0)]


def test_a_cancelled_line_is_replaced_by_a_later_success_but_never_replaces_one() -> None:
    state = fold([result(0, total=1, status="cancelled")])
    merged = merge_result(state, result(0, total=1), 101.0)
    assert merged.outcome == "replaced" and merged.state is not None
    assert merged.state.clips[0].status == "succeeded"
    again = merge_result(merged.state, result(0, total=1, status="cancelled"), 102.0)
    assert again.outcome == "duplicate" and again.state is not None
    assert again.state.clips[0].status == "succeeded"


@pytest.mark.parametrize("total", [10_001, 10**9, 2**62])
def test_a_result_claiming_an_absurd_total_is_invalid(total: int) -> None:
    # A job closed on its timeout lists every missing index: total 2**62 would have the
    # aggregator build that list (the fuzz suite).
    assert merge_result(None, result(0, total=total), 100.0).outcome == "invalid"
    assert merge_result(None, result(0, total=10_000), 100.0).outcome == "merged"


@pytest.mark.parametrize("duration", [-5.0, 1e308, float("inf"), float("nan"), 3601.0])
def test_a_clip_of_impossible_duration_is_invalid(duration: float) -> None:
    # Laid out in the timeline and the subtitles, it made every close of the job fail.
    assert merge_result(None, result(0, total=1, duration=duration), 100.0).outcome == "invalid"


def _v(index: int, version: int, total: int = 3,
       status: Status = "succeeded") -> SynthesisResult:
    r = result(index, total=total, status=status, request_id=f"ep1-v{version}-{index:04d}")
    assert r.job is not None
    return msgspec.structs.replace(r, job=msgspec.structs.replace(r.job, version=version))


def test_versions_open_after_the_last_is_emitted_and_older_or_early_answers_are_dropped() -> None:
    v1 = fold([result(0), result(1), result(2, status="rejected")])
    assert v1 is not None and v1.complete and v1.version == 1
    # Version 2 while version 1 is still open: early, dropped (the client never does this).
    assert merge_result(v1, _v(2, 2), 5.0) == (None, "early")
    marker = emitted_marker(v1, "partial", 5.0)
    assert marker.version == 1 and needs_opening(marker, _v(2, 2))
    assert not needs_opening(marker, result(2)) and not needs_opening(None, result(0))
    manifest = JobManifest(job_id="ep1", total=3, lines=[], created_at="t", version=2,
                           base_version=1, carried=build_job(
                               v1, manifest=None, gap_ms=0, completed_at="t").clips[:2])
    opened = open_version("ep1", 2, manifest, 6.0)
    assert opened is not None and sorted(opened.clips) == [0, 1] and not opened.complete
    assert open_version("ep1", 3, manifest, 6.0) is None  # another version's manifest
    state, outcome = merge_result(opened, _v(2, 2), 7.0)
    assert outcome == "merged" and state is not None and state.complete
    job = build_job(state, manifest=None, gap_ms=0, completed_at="t")
    assert (job.version, job.status, [c.version for c in job.clips]) == (2, "succeeded",
                                                                          [1, 1, 2])
    # A redelivered version-1 answer after version 2 opened is late, not a replacement.
    assert merge_result(state, result(2), 8.0) == (None, "late")
    # Without a manifest a newer version opens empty over the marker and waits for all.
    bare, outcome = merge_result(marker, _v(0, 2), 9.0)
    assert outcome == "merged" and bare is not None and bare.version == 2 and \
        not bare.complete


def test_two_tenants_jobs_of_one_id_are_two_jobs_and_keep_their_tenant() -> None:
    """Job IDs are unique within a tenant: the table key scopes them, and the state, the
    emitted marker and the event keep the owner."""
    from consumers.aggregator.state import job_id_of, table_key

    acme = [msgspec.structs.replace(result(i, total=2), tenant="acme") for i in range(2)]
    plain = result(0, total=2)
    assert table_key(acme[0]) == b"acme/ep1" and table_key(plain) == b"ep1"
    assert job_id_of(table_key(acme[0])) == job_id_of(table_key(plain)) == "ep1"
    state = fold(acme)
    assert state is not None and state.complete and state.tenant == "acme"
    assert build_job(state, manifest=None, gap_ms=0, completed_at="t").tenant == "acme"
    assert emitted_marker(state, "succeeded", 1.0).tenant == "acme"
    reopened = open_version("ep1", 2, None, 1.0, "acme")
    assert reopened is None  # no manifest: the merge opens it, with the result's tenant
    default = fold([plain])
    assert default is not None and default.tenant is None
