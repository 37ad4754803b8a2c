"""The v1 events that cross Kafka, as msgspec structs, and their orjson-compatible codecs.

Readers ignore unknown fields (msgspec's default) so a v1 reader survives a v1.1 writer.
Encoding omits fields left at their default, keeping events small and stable; the `schema`
field is each struct's msgspec tag, so it is always written and checked on decode.
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


class SynthesisRequest(_Event, tag_field="schema", tag=REQUEST_SCHEMA):
    request_id: str
    voice_id: str
    text: str
    mode: Mode | None = None
    instruct: str | None = None
    language: str | None = None
    format: AudioFormat = "wav"
    sample_rate: int | None = None
    speed: float = 1.0
    deadline: str | None = None
    job: JobRef | None = None
    metadata: dict[str, Any] | None = None


class VoiceRegistration(_Event, tag_field="schema", tag=VOICE_SCHEMA):
    voice_id: str
    reference: str
    sha256: str
    created_at: str
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


class SynthesisResult(_Event, tag_field="schema", tag=RESULT_SCHEMA):
    request_id: str
    voice_id: str
    status: Status
    completed_at: str
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


class DeadLetter(_Event, tag_field="schema", tag=DLQ_SCHEMA):
    topic: str
    partition: int
    offset: int
    reason: str
    failed_at: str
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
