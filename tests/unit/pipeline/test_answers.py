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
