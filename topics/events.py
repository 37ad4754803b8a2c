"""The v1 events that cross Kafka, as msgspec structs, and their orjson-compatible codecs.

Readers ignore unknown fields (msgspec's default) so a v1 reader survives a v1.1 writer.
Encoding omits fields left at their default, keeping events small and stable.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

REQUEST_SCHEMA = "tts.request.v1"
VOICE_SCHEMA = "tts.voice.v1"
RESULT_SCHEMA = "tts.result.v1"
JOB_SCHEMA = "tts.job.v1"
DLQ_SCHEMA = "tts.dlq.v1"

Mode = Literal["zero_shot", "cross_lingual", "instruct", "sft"]
AudioFormat = Literal["wav", "flac", "mp3", "opus"]
Status = Literal["succeeded", "failed", "rejected", "expired"]


class _Event(msgspec.Struct, omit_defaults=True, kw_only=True):
    pass


class JobRef(_Event):
    id: str
    index: int
    total: int


class SynthesisRequest(_Event):
    request_id: str
    voice_id: str
    text: str
    schema: str = REQUEST_SCHEMA
    mode: Mode | None = None
    instruct: str | None = None
    language: str | None = None
    format: AudioFormat = "wav"
    sample_rate: int | None = None
    speed: float = 1.0
    deadline: str | None = None
    job: JobRef | None = None
    metadata: dict[str, Any] | None = None


class VoiceRegistration(_Event):
    voice_id: str
    reference: str
    sha256: str
    created_at: str
    schema: str = VOICE_SCHEMA
    prompt_text: str | None = None
    language: str | None = None


class AudioRef(_Event):
    bucket: str
    key: str
    url: str
    format: str
    sample_rate: int
    duration_s: float
    bytes: int
    sha256: str


class ErrorInfo(_Event):
    code: str
    message: str
    retryable: bool = False


class SynthesisResult(_Event):
    request_id: str
    voice_id: str
    status: Status
    completed_at: str
    schema: str = RESULT_SCHEMA
    audio: AudioRef | None = None
    error: ErrorInfo | None = None
    job: JobRef | None = None
    metadata: dict[str, Any] | None = None
    timings_ms: dict[str, float] = msgspec.field(default_factory=dict)
    rtf: float | None = None
    engine: str | None = None
    worker: str | None = None
    attempt: int = 1

    def result_key(self) -> bytes:
        """Results are keyed by job ID when part of a job, else by request ID."""
        return (self.job.id if self.job else self.request_id).encode()


class DeadLetter(_Event):
    topic: str
    partition: int
    offset: int
    reason: str
    failed_at: str
    schema: str = DLQ_SCHEMA
    key_b64: str | None = None
    value_b64: str = ""
    headers: list[tuple[str, str]] = msgspec.field(default_factory=list)


_encoder = msgspec.json.Encoder()


def encode(event: _Event) -> bytes:
    return _encoder.encode(event)


def decode_result(raw: bytes) -> SynthesisResult:
    return msgspec.json.decode(raw, type=SynthesisResult)


def decode_voice(raw: bytes) -> VoiceRegistration:
    return msgspec.json.decode(raw, type=VoiceRegistration)
