from __future__ import annotations

import re

import pytest

from pipeline.answers import Answers, now_iso
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import JobRef, SynthesisRequest

ANSWERS = Answers(engine="espeak", worker="w-1")


def test_now_iso_is_utc_with_milliseconds_and_a_z() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now_iso())


def test_an_invalid_request_is_answered_rejected_and_not_retryable() -> None:
    exc = InvalidRequest(ErrorCode.TEXT_TOO_LONG, "text has 2,001 characters, limit 2,000",
                         request_id="r-1", voice_id="alice")
    result = ANSWERS.rejected(exc)
    assert (result.request_id, result.voice_id, result.status) == ("r-1", "alice", "rejected")
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("text_too_long", False)
    assert result.error.message == "text has 2,001 characters, limit 2,000"
    assert (result.engine, result.worker, result.attempt) == ("espeak", "w-1", 1)


def test_a_rejection_without_a_voice_names_none() -> None:
    exc = InvalidRequest(ErrorCode.INVALID_REQUEST, "voice_id: missing", request_id="r-2")
    assert ANSWERS.rejected(exc).voice_id == ""


def test_a_record_without_request_id_cannot_be_answered() -> None:
    with pytest.raises(ValueError, match="DLQ"):
        ANSWERS.rejected(InvalidRequest(ErrorCode.INVALID_JSON, "not an object"))


def test_a_request_out_of_retries_is_failed_with_its_job_metadata_and_attempt() -> None:
    request = SynthesisRequest(request_id="r-3", voice_id="bob", text="hi",
                               job=JobRef(id="ep-1", index=2, total=5),
                               metadata={"scene": 4})
    error = VoiceFactoryError(ErrorCode.ENGINE_ERROR, "CUDA error: device-side assert")
    result = ANSWERS.failed(request, error, attempt=3)
    assert (result.status, result.attempt, result.job, result.metadata) == (
        "failed", 3, request.job, {"scene": 4})
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("engine_error", True)


def test_a_cancelled_request_keeps_its_job_and_is_not_retryable() -> None:
    request = SynthesisRequest(request_id="j-0007", voice_id="bob", text="hi",
                               job=JobRef(id="j", index=7, total=100), metadata={"scene": 3})
    result = ANSWERS.cancelled(request, attempt=2, reason="script withdrawn", queued_ms=812.345)
    assert (result.request_id, result.voice_id, result.status) == ("j-0007", "bob", "cancelled")
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == (ErrorCode.CANCELLED.value, False)
    assert result.error.message == "cancelled before synthesis: script withdrawn"
    assert result.job == JobRef(id="j", index=7, total=100)
    assert result.metadata == {"scene": 3}
    assert (result.audio, result.attempt, result.worker) == (None, 2, "w-1")
    assert result.timings_ms == {"queued": 812.35, "total": 812.35}
    assert result.result_key() == b"j"  # the aggregator sees it under its job


def test_a_cancel_without_a_reason_says_so_plainly() -> None:
    request = SynthesisRequest(request_id="r-9", voice_id="bob", text="hi")
    result = ANSWERS.cancelled(request)
    assert result.error is not None and result.error.message == "cancelled before synthesis"
    assert result.timings_ms == {}
