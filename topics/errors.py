"""The project's exceptions and the closed set of error codes that reach result events.

Every failure a user can see carries an `ErrorCode`; the retry policy reads `retryable`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ErrorCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_SCHEMA = "unsupported_schema"
    VOICE_NOT_FOUND = "voice_not_found"
    REFERENCE_INVALID = "reference_invalid"
    TEXT_TOO_LONG = "text_too_long"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    ENGINE_ERROR = "engine_error"
    STORAGE_ERROR = "storage_error"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    CANCELLED = "cancelled"  # a tts.control cancel reached the request before its answer
    # The request_id already names another request (other text, voice or parameters): the
    # first one's object and answer stand (pipeline/fingerprint.py).
    REQUEST_ID_REUSED = "request_id_reused"


# Transient by nature: a later attempt may succeed without the producer changing anything.
RETRYABLE_CODES = frozenset({ErrorCode.ENGINE_ERROR, ErrorCode.STORAGE_ERROR})

# A message reaches a result event (and a DLQ record's reason) and often quotes the
# offending value: a 900 KB `schema` string quoted in full made a result too large for the
# broker, and its publisher retried it forever.
MAX_MESSAGE_CHARS = 1000


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text`, cut in the middle to at most `limit` characters when longer: the start names
    the rule broken, the end often where (msgspec's "- at `$.format`")."""
    if len(text) <= limit:
        return text
    marker = f" [...; {len(text):,} characters in all] "
    room = max(0, limit - len(marker))
    head = room * 2 // 3
    return text[:head] + marker + text[len(text) - (room - head):]


class VoiceFactoryError(Exception):
    """Root of every error the project raises on purpose."""

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool | None = None) -> None:
        message = clip(message)
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.retryable = code in RETRYABLE_CODES if retryable is None else retryable


class UndecodableMessage(VoiceFactoryError):
    """The bytes are not a UTF-8 JSON object: the message goes to the DLQ."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_JSON, message, retryable=False)


class InvalidRequest(VoiceFactoryError):
    """The message parsed but breaks a rule: its producer gets a `rejected` result."""

    def __init__(self, code: ErrorCode, message: str, *, request_id: str | None = None,
                 voice_id: str | None = None) -> None:
        super().__init__(code, message, retryable=False)
        self.request_id = request_id
        self.voice_id = voice_id


class LocalError(VoiceFactoryError):
    """An error raised and handled inside a process (a clip that does not decode, an engine
    that cannot load), not produced as such: it reads as its message alone, and `code` names
    the result code it becomes if a request's answer ever carries it."""

    default_code: ClassVar[ErrorCode] = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message, retryable=False)

    def __str__(self) -> str:
        return self.message
