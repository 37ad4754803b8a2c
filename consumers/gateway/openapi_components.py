"""The OpenAPI document's `components`: JSON Schemas of the msgspec types the gateway speaks.

    the bodies and answers (`SpeechBody` in consumers.gateway.speech; `VoiceForm`,
      `Voice`, ... in consumers.gateway.voices; `JobScript`, `JobRerun`, `JobFinished`, ...
      in consumers.gateway.jobs; `JobTimeline` and `Fleet` in consumers.gateway.console_api;
      `UsageAnswer` in consumers.gateway.usage; the consent shapes in
      consumers.gateway.consents; `ApiError`, `Health`, `Readiness` and the `sse` events
      here, what serve.error_body, audio.sse_delta and the ops listener's probes write)
    -> msgspec.json.schema_components -> components.schemas (JSON Schema 2020-12, the
      dialect of OpenAPI 3.1), by the types' names
    -> by hand: the multipart uploads (`VoiceUpload`, `ConsentUpload`, `CustomVoiceUpload`),
      the rules across fields msgspec types cannot carry, `JobId` and `VoiceId`
    -> `components()`: schemas, the answers' headers and the bearer scheme, for
      consumers.gateway.openapi's document; `ref(name)` is how an operation
      (consumers.gateway.openapi_paths) points at one.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import msgspec

from consumers.gateway import consents, console_api, jobs, usage, voices
from consumers.gateway.speech import SpeechBody
from topics.validation import OPUS_RATES, REQUEST_ID_MAX

JSON = "application/json"
_REF = "#/components/schemas/{name}"


# -- what the app writes outside the routes' own types -----------------------------------------

class ErrorDetail(msgspec.Struct, kw_only=True):
    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None  # the body field at fault, where one is
    code: str  # the error code: invalid_request, voice_not_found, rate_limited, ...
    # 403 missing_scope: the scope the key lacks, and every scope the route accepts
    scope: str | msgspec.UnsetType = msgspec.UNSET
    accepted: list[str] | msgspec.UnsetType = msgspec.UNSET


class ApiError(msgspec.Struct, kw_only=True):
    """OpenAI's error object (serve.error_body), with a voice upload's verdict table or a
    job's unregistered voices beside it."""

    error: ErrorDetail
    checks: list[voices.RuleCheck] | msgspec.UnsetType = msgspec.UNSET
    voices: dict[str, list[int]] | msgspec.UnsetType = msgspec.UNSET  # voice -> its lines


class Health(msgspec.Struct):
    status: Literal["ok"]


class ReadinessChecks(msgspec.Struct, kw_only=True):
    producer: bool
    reply_partitions: list[int]  # this replica's partitions of tts.audio
    keys: int
    interactive_lag: int | None  # None until the first sample


class Readiness(msgspec.Struct, kw_only=True):
    status: Literal["ok", "unavailable"]
    checks: ReadinessChecks


class AudioDelta(msgspec.Struct, kw_only=True):
    """An `sse` answer's event with the next piece of audio (audio.sse_delta)."""

    type: Literal["speech.audio.delta"]
    audio: str  # base64


class Usage(msgspec.Struct, kw_only=True):
    input_tokens: int  # characters of input
    output_tokens: int  # bytes of audio
    total_tokens: int


class AudioDone(msgspec.Struct, kw_only=True):
    type: Literal["speech.audio.done"]
    usage: Usage


class StreamFailure(msgspec.Struct, kw_only=True):
    code: str
    message: str


class StreamError(msgspec.Struct, kw_only=True):
    """The last event of an `sse` answer that failed after audio went out."""

    type: Literal["error"]
    error: StreamFailure


_TYPES: tuple[type[msgspec.Struct], ...] = (
    SpeechBody, voices.VoiceForm, jobs.JobScript, jobs.JobRerun, voices.Voice,
    voices.VoiceCreated, voices.VoiceCheck, voices.VoiceList, voices.VoiceDeleted,
    jobs.JobQueued, jobs.JobFinished, jobs.JobRunning, jobs.JobCancelled,
    console_api.JobTimeline, console_api.Fleet, usage.UsageAnswer, ApiError, Health, Readiness,
    AudioDelta, AudioDone, StreamError, consents.VoiceConsent, consents.ConsentDeleted,
    consents.CustomVoice)


def ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(name=name)}


# Named by the answers' `headers` (consumers.gateway.openapi_paths.Answer).
_HEADERS = {
    "Retry-After": {"description": "Whole seconds to wait before retrying", "required": True,
                    "schema": {"type": "integer", "minimum": 0}},
    "Content-Disposition": {"description": "attachment; filename=\"...\"",
                            "schema": {"type": "string"}},
    "X-Request-Id": {"description": "The request ID of the (first part of the) synthesis "
                                    "request; parts of a long input add -p0, -p1, ...",
                     "schema": {"type": "string"}},
}


def components() -> dict[str, Any]:
    _, schemas = msgspec.json.schema_components(_TYPES, ref_template=_REF)
    # A voice upload: the form's text parts and the reference clip itself.
    upload = copy.deepcopy(schemas["VoiceForm"])
    upload["title"] = "VoiceUpload"
    upload["properties"]["reference"] = {
        "type": "string", "format": "binary",
        "description": "The reference clip (wav/flac/mp3/ogg/m4a, 3-30 s of speech)"}
    upload["properties"]["consent_recording"] = {
        "type": "string", "format": "binary",
        "description": "The speaker saying the consent statement (instead of `consent`)"}
    upload["required"] = ["reference"]
    schemas["VoiceUpload"] = upload
    audio_part = {"type": "string", "format": "binary"}
    text = {"type": "string", "minLength": 1}
    schemas["ConsentUpload"] = {
        "title": "ConsentUpload", "type": "object", "additionalProperties": False,
        "required": ["name", "recording"],
        "properties": {"name": {**text, "maxLength": 200, "description": "The speaker"},
                       "recording": audio_part, "language": {**text, "maxLength": 35},
                       "statement": {**text, "maxLength": 1000}}}
    schemas["CustomVoiceUpload"] = {
        "title": "CustomVoiceUpload", "type": "object", "additionalProperties": False,
        "required": ["name", "consent", "audio_sample"],
        "properties": {"name": ref("VoiceId"), "consent": ref("VoiceId"),
                       "audio_sample": audio_part}}
    # Rules across fields, which msgspec types cannot carry: a line's voice is its own or the
    # script's; opus runs at OPUS_RATES only, the line's format or, absent, the script's.
    opus_rate = {"properties": {"sample_rate": {"enum": [*OPUS_RATES, None]}}}
    schemas["ScriptLine"]["if"] = {"properties": {"format": {"const": "opus"}},
                                   "required": ["format"]}
    schemas["ScriptLine"]["then"] = opus_rate
    schemas["JobScript"]["allOf"] = [
        {"anyOf": [{"required": ["voice"]},
                   {"properties": {"lines": {"items": {"required": ["voice"]}}}}]},
        {"if": {"properties": {"format": {"const": "opus"}}, "required": ["format"]},
         "then": {"properties": {"lines": {"items": {
             "if": {"not": {"required": ["format"]}}, "then": opus_rate}}}}}]
    # A re-run names something: `failed` true, or at least one line (`job rerun` refuses
    # neither, exit 2).
    schemas["JobRerun"]["anyOf"] = [
        {"required": ["failed"], "properties": {"failed": {"const": True}}},
        {"required": ["lines"], "properties": {"lines": {"minItems": 1}}}]
    job_id = schemas["JobScript"]["properties"]["job_id"]
    schemas["JobId"] = {**job_id, "maxLength": REQUEST_ID_MAX}
    schemas["VoiceId"] = schemas["VoiceForm"]["properties"]["voice_id"]
    return {"schemas": dict(sorted(schemas.items())), "headers": _HEADERS,
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "A key from `voicefactory gateway keys add TENANT`"}}}
