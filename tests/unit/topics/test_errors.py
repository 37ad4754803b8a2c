from __future__ import annotations

import pytest

from pipeline.audio import AudioDecodeError
from pipeline.engines.base import EngineUnavailable
from pipeline.profiles import ProfileFormatError
from topics.errors import ErrorCode, LocalError, VoiceFactoryError


def test_a_result_error_reads_as_code_and_message() -> None:
    exc = VoiceFactoryError(ErrorCode.STORAGE_ERROR, "S3 unreachable")
    assert str(exc) == "storage_error: S3 unreachable"
    assert exc.retryable


@pytest.mark.parametrize(("cls", "code", "builtin"), [
    (AudioDecodeError, ErrorCode.REFERENCE_INVALID, ValueError),
    (ProfileFormatError, ErrorCode.ENGINE_ERROR, ValueError),
    (EngineUnavailable, ErrorCode.ENGINE_ERROR, RuntimeError),
])
def test_local_errors_sit_under_the_root_and_read_as_their_message(
        cls: type[LocalError], code: ErrorCode, builtin: type[Exception]) -> None:
    exc = cls("espeak-ng not found on PATH")
    assert isinstance(exc, VoiceFactoryError)
    assert isinstance(exc, builtin)  # callers that caught the builtin still do
    assert str(exc) == "espeak-ng not found on PATH"
    assert (exc.code, exc.retryable) == (code, False)


def test_long_messages_are_cut_in_the_middle_keeping_both_ends() -> None:
    from topics.errors import MAX_MESSAGE_CHARS, clip

    text = "schema " + "x" * 5000 + " - at `$.schema`"
    exc = VoiceFactoryError(ErrorCode.INVALID_REQUEST, text)
    assert len(exc.message) == MAX_MESSAGE_CHARS
    assert exc.message.startswith("schema xxx") and exc.message.endswith("- at `$.schema`")
    assert "5,023 characters in all" in exc.message
    assert clip("short") == "short"
