"""The v1 events that cross Kafka, as msgspec structs, and their orjson-compatible codecs.

Readers ignore unknown fields (msgspec's default) so a v1 reader survives a v1.1 writer.
Encoding omits fields left at their default, keeping events small and stable; the `schema`
field is each struct's msgspec tag, so it is always written and checked on decode.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

REQUEST_SCHEMA = "tts.request.v1"
VOICE_SCHEMA = "tts.voice.v1"
RESULT_SCHEMA = "tts.result.v1"
JOB_SCHEMA = "tts.job.v1"
DLQ_SCHEMA = "tts.dlq.v1"
CONTROL_SCHEMA = "tts.control.v1"
AUDIT_SCHEMA = "tts.audit.v1"

Mode = Literal["zero_shot", "cross_lingual", "instruct", "sft"]
AudioFormat = Literal["wav", "flac", "mp3", "opus"]
Status = Literal["succeeded", "failed", "rejected", "expired", "cancelled"]
JobStatus = Literal["succeeded", "partial", "failed"]


class _Event(msgspec.Struct, omit_defaults=True, kw_only=True):
    pass


class JobRef(_Event):
    """A request's place in a job. `version` (v1 addition, absent: 1) is the job's revision
    the request belongs to: a revision re-produces only changed or failed lines."""

    id: str
    index: int
    total: int
    version: int | None = None


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
    reference: str | None = None  # ad-hoc voice: s3://bucket/key of a clip instead of a voice
    # v1 addition: chunk records on tts.audio while synthesizing, before the stored object
    stream: bool = False
    # v1 addition (topics/tenancy.py): the owner, set by the gateway from the API key;
    # absent: the `default` tenant
    tenant: str | None = None


class ConsentRef(_Event):
    """The consent a voice was registered with (v1 addition): the consent record's ID, the
    stored recording, the statement read, who gave it, when, and the speaker similarity
    (GE2E cosine, -1..1) between the recording and the voice's reference."""

    id: str
    recording: str
    statement: str
    speaker: str
    recorded_at: str
    similarity: float


class VoiceRegistration(_Event, tag_field="schema", tag=VOICE_SCHEMA):
    voice_id: str
    reference: str
    sha256: str
    created_at: str
    prompt_text: str | None = None
    language: str | None = None
    tenant: str | None = None  # v1 addition; absent: `default`
    consent: ConsentRef | None = None  # v1 addition: the speaker's recorded consent


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


class Quality(_Event):
    """Signals about one output: cosine similarity of its speaker embedding with the
    reference's (GE2E, -1..1; None where not measured), the integrated loudness of the
    delivered audio (after normalisation) and of the engine's output before it, and named
    warnings. `loudness_input_lufs` is a v1 addition; readers that knew only
    `loudness_lufs` now read the delivered level there."""

    speaker_similarity: float | None = None
    loudness_lufs: float | None = None
    loudness_input_lufs: float | None = None
    warnings: list[str] = msgspec.field(default_factory=list)


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
    quality: Quality | None = None
    tenant: str | None = None  # v1 addition: the request's; absent: `default`

    def result_key(self) -> bytes:
        """Results are keyed by job ID when part of a job, else by request ID."""
        return (self.job.id if self.job else self.request_id).encode()


class JobClip(_Event):
    """One line of a job as the aggregator saw its result; `text` is the script's line;
    `version` (v1 addition) is the job version whose request produced it, lower than the
    event's own for a clip carried over unchanged from an earlier version."""

    index: int
    request_id: str
    voice_id: str
    text: str
    status: Status
    duration_s: float = 0.0
    audio: AudioRef | None = None
    error: ErrorInfo | None = None
    version: int | None = None


class ClipSpan(_Event):
    index: int
    start_s: float
    end_s: float


class JobCompleted(_Event, tag_field="schema", tag=JOB_SCHEMA):
    """One finished job on tts.jobs: every answered line in index order and its timeline.

    `missing` lists the indices that never answered (the job closed on its timeout);
    `track` is the whole job as one audio object when the script asked for it (concat).
    v1 additions: `subtitles_url` (presigned, like the clips' `url`), the WebVTT twin
    `subtitles_vtt` / `subtitles_vtt_url`, `gap_ms`, the silence the timeline puts
    between neighbouring clips, and `version`: a job keeps its ID across revisions and
    has one event per version (absent: 1).
    An event too big for one record (about 1,000 lines with their presigned links) leaves
    `clips` and `timeline` empty, lists them in `omitted`, and names the stored job.json,
    which holds the same event whole: `job_json` (s3://) and `job_json_url` (presigned).
    """

    job_id: str
    status: JobStatus
    total: int
    clips: list[JobClip]
    timeline: list[ClipSpan]
    completed_at: str
    duration_s: float = 0.0
    subtitles: str | None = None
    missing: list[int] = msgspec.field(default_factory=list)
    track: AudioRef | None = None
    subtitles_url: str | None = None
    subtitles_vtt: str | None = None
    subtitles_vtt_url: str | None = None
    gap_ms: int | None = None
    version: int | None = None
    job_json: str | None = None
    job_json_url: str | None = None
    omitted: list[Literal["clips", "timeline"]] = msgspec.field(default_factory=list)
    tenant: str | None = None  # v1 addition; absent: `default`


class ControlCommand(_Event, tag_field="schema", tag=CONTROL_SCHEMA):
    """A command on tts.control, read by every worker (and the aggregator for jobs).

    Exactly one of `request_id` (one request, queued or streaming) and `job_id` (every line
    of a job not yet answered) is set; `decode_control` enforces it.
    """

    action: Literal["cancel"]
    request_id: str | None = None
    job_id: str | None = None
    requested_at: str | None = None
    reason: str | None = None
    tenant: str | None = None  # v1 addition: cancels only that tenant's; absent: `default`


# What an audit event may say happened (an open set: readers keep an action they do not
# know; docs/contract.md lists what each one means).
AUDIT_ACTIONS = ("voice.create", "voice.delete", "consent.create", "consent.delete",
                 "key.add", "key.revoke", "job.submit", "job.rerun")


class AuditEvent(_Event, tag_field="schema", tag=AUDIT_SCHEMA):
    """One thing a tenant's key (or an operator's CLI) did, on the append-only tts.audit,
    keyed by tenant. `key_id` is the acting key's id (the first 12 hex digits of its hash,
    never the key); absent for an operator's CLI. `client` is the caller's address as the
    gateway saw it (its peer), or `cli:<user>@<host>`."""

    tenant: str
    action: str
    object: str
    time: str
    key_id: str | None = None
    client: str | None = None
    request_id: str | None = None  # the HTTP request's X-Request-Id, when the caller sent one


class DeadLetter(_Event, tag_field="schema", tag=DLQ_SCHEMA):
    topic: str
    partition: int
    offset: int
    reason: str
    failed_at: str
    key_b64: str | None = None
    value_b64: str = ""
    # [name, base64 of the value] per original header, in their order; null for a header
    # whose value was null.
    headers: list[tuple[str, str | None]] = msgspec.field(default_factory=list)
    # Optional (added in v1, readers of older records see them absent): the original value's
    # size and hex SHA-256; when the value was too big to carry inline, `value_ref`
    # (s3://<bucket>/dlq/<topic>/<partition>/<offset>.bin) holds its bytes, `value_b64` is
    # empty and `value_prefix_b64` has its first bytes.
    value_bytes: int | None = None
    value_sha256: str | None = None
    value_ref: str | None = None
    value_prefix_b64: str | None = None
    # Parts of the original this record carries neither inline nor by reference.
    omitted: list[Literal["key", "value", "headers"]] = msgspec.field(default_factory=list)


_encoder = msgspec.json.Encoder()


def encode(event: _Event) -> bytes:
    return _encoder.encode(event)


E = TypeVar("E")


def decode_json(raw: bytes, event: type[E]) -> E:
    """msgspec's decode, with one more failure it reports as a DecodeError (a ValueError, as
    every reader already catches): a value nested about 1,000 deep, known field or unknown,
    raises RecursionError, which killed the aggregator's agent and would any other reader."""
    try:
        return msgspec.json.decode(raw, type=event)
    except RecursionError:
        raise msgspec.DecodeError("the JSON is nested too deeply") from None


def decode_result(raw: bytes) -> SynthesisResult:
    return decode_json(raw, SynthesisResult)


def decode_voice(raw: bytes) -> VoiceRegistration:
    return decode_json(raw, VoiceRegistration)


def decode_job(raw: bytes) -> JobCompleted:
    return decode_json(raw, JobCompleted)


def decode_audit(raw: bytes) -> AuditEvent:
    return decode_json(raw, AuditEvent)
