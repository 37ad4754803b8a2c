"""The OpenAPI document's `paths`: one operation per route of the gateway, with its answers.

    `OPERATIONS`, one entry per route: its body (a schema of
      consumers.gateway.openapi_components, by `ref`), an accepted example, its parameters
      and its answers by status
    -> the refusals every /v1 route shares, added to each (`_GUARDED`: 401 without a key,
      403 without the scope, 429 over the tenant's rate; 413 over the body limit where it
      takes a body)
    -> `_operation`: the path's `{id}` parameter (a voice, consent or job ID), the request
      body, bearer auth and `x-vf-scopes` (consumers.gateway.scopes) on /v1/*
    -> `paths()`: path -> method -> operation, for consumers.gateway.openapi's document.

Every route of the app is here but the console's own files (`NOT_API`); the unit tests check
that the two together are exactly the routes the app serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from consumers.gateway import audio, console_api, scopes, voices
from consumers.gateway.openapi_components import JSON, ref

# Served without a description: the web console's static files under /console (the page, its
# script and style; consumers.gateway.console), which are not API operations.
NOT_API = frozenset({"/console", "/console/", "/console/{name}"})


# -- the routes --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    description: str
    content: dict[str, Any] = field(default_factory=dict)  # media type -> schema
    headers: tuple[str, ...] = ()  # names in components.headers


def _json(name: str, description: str, *headers: str) -> Answer:
    return Answer(description, {JSON: ref(name)}, headers)


def _error(description: str, *headers: str) -> Answer:
    return _json("ApiError", description, *headers)


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    answers: dict[int, Answer]
    body: dict[str, Any] | None = None  # media type -> schema
    tag: str = "probes"
    example: dict[str, Any] | None = None  # a body that is accepted (docs/gateway.md's)
    parameters: tuple[dict[str, Any], ...] = ()  # beside {id}: query and other path ones

    @property
    def authenticated(self) -> bool:
        return self.path.startswith("/v1/")


_AUDIO = {media: {"type": "string", "format": "binary"}
          for media in dict.fromkeys(audio.CONTENT_TYPES.values())}
# Before OpenAPI 3.2's itemSchema, a text/event-stream schema describes one event.
_SSE = {audio.SSE_CONTENT_TYPE: {
    "type": "object", "required": ["data"],
    "description": "speech.audio.delta events, then speech.audio.done (or error)",
    "properties": {"data": {
        "type": "string", "contentMediaType": JSON,
        "contentSchema": {"anyOf": [ref("AudioDelta"), ref("AudioDone"),
                                    ref("StreamError")]}}}}}
_ID = {"in": "path", "name": "id", "required": True}
_STORE_DOWN = _error("The object store is unavailable (`storage_unavailable`); retry after "
                     "Retry-After", "Retry-After")
_QUOTA = _error("Over the tenant's rate (`rate_limited`) or its monthly audio quota "
                "(`quota_exceeded`, Retry-After: until the next month); nothing stored or "
                "produced", "Retry-After")
_MONTH = {"in": "query", "name": "month", "required": False,
          "description": "The UTC month, YYYY-MM; absent: the current one",
          "schema": {"type": "string", "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])$"}}
_BAD_ID = _error("The ID is malformed: [A-Za-z0-9._:-], no '..' (`invalid_request`)")
_NO_CONSENT = _error("No pending consent of this ID in the caller's tenant "
                     "(`consent_not_found`)")
_NO_JOB = _error("No finished version of the job (`job_not_found`)")
_CLIP_AUDIO = {media: {"type": "string", "format": "binary"}
               for media in dict.fromkeys([*console_api.AUDIO_TYPES.values(),
                                           "application/octet-stream"])}
_DRY_RUN = {"in": "query", "name": "dry_run", "required": False,
            "description": "1 or true: check the reference only (200 with the verdict "
                           "table), nothing stored or produced; 0, false or absent: register",
            "schema": {"type": "string", "enum": list(voices.DRY_RUN)}}
_INDEX = {"in": "path", "name": "index", "required": True,
          "description": "The line's index (0-based, as clips[].index)",
          "schema": {"type": "integer", "minimum": 0}}

# What a reader (and the fuzzer's examples phase) starts from: the voice of docs/gateway.md.
SPEECH_EXAMPLE = {"model": "tts-1", "voice": "narrator-1", "input": "Hello.",
                  "response_format": "wav"}
JOB_EXAMPLE = {"job_id": "episode-12", "voice": "narrator-1", "language": "en",
               "lines": [{"text": "Hello."}, {"text": "Goodbye.", "speed": 1.1}]}

OPERATIONS: tuple[Operation, ...] = (
    Operation("post", "/v1/audio/speech", "createSpeech", "OpenAI's speech request", tag="audio",
              body={JSON: ref("SpeechBody")}, example=SPEECH_EXAMPLE, answers={
                  200: Answer("The audio: the whole file (no stream_format), chunked bytes "
                              "(`audio`) or server-sent events (`sse`)",
                              {**_AUDIO, **_SSE}, ("X-Request-Id",)),
                  400: _error("The body is not JSON (`invalid_json`), a field breaks a rule "
                              "(`invalid_request`, `param` names it), or the worker rejected "
                              "a part"),
                  404: _error("The voice is not registered (`voice_not_found`)"),
                  409: _error("The request was cancelled (`cancelled`)"),
                  422: _error("The voice's reference failed the worker's check "
                              "(`reference_invalid`)"),
                  429: _error("Over the tenant's rate (`rate_limited`), concurrent streams "
                              "(`too_many_streams`) or monthly audio quota "
                              "(`quota_exceeded`, Retry-After: until the next month)",
                              "Retry-After"),
                  502: _error("The fleet failed the request (`engine_error`, ...)"),
                  503: _error("The interactive lane is over its lag threshold (`overloaded`), "
                              "the replica holds no reply partition yet (`not_ready`), Kafka "
                              "refused the request (`kafka_error`) or the object store is "
                              "down (`storage_unavailable`); retry after Retry-After",
                              "Retry-After"),
                  504: _error("No answer within the gateway's timeout (`timeout`), or the "
                              "request's deadline passed (`expired`)")}),
    Operation("get", "/v1/voices", "listVoices", "The voice registry", tag="voices", answers={
        200: _json("VoiceList", "Every registered voice, by ID"), 503: _STORE_DOWN}),
    Operation("post", "/v1/voices", "createVoice", "Register a voice from a reference clip",
              tag="voices", body={"multipart/form-data": ref("VoiceUpload")},
              parameters=(_DRY_RUN,), answers={
                  200: _json("VoiceCheck", "`dry_run`: the reference passed every rule; "
                                           "nothing stored or produced"),
                  201: _json("VoiceCreated", "Registered, with the reference's verdict table"),
                  400: _error("The `reference` file part is missing, a text part breaks a "
                              "rule, the form is malformed or `dry_run` is none of its "
                              "values (`invalid_request`); no consent (`consent_required`)"),
                  415: _error("Not multipart/form-data (`unsupported_media_type`)"),
                  404: _NO_CONSENT,
                  422: _error("The reference breaks a rule (`reference_invalid`); `checks` "
                              "is the verdict table; the consent recording breaks one "
                              "(`consent_invalid`) or is another speaker's "
                              "(`consent_mismatch`)"),
                  503: _STORE_DOWN}),
    Operation("post", "/v1/audio/voice_consents", "createVoiceConsent",
              "Store a speaker's consent recording (OpenAI's shape)", tag="voices",
              body={"multipart/form-data": ref("ConsentUpload")}, answers={
                  201: _json("VoiceConsent", "Stored, pending: name it in a voice upload"),
                  400: _error("A part is missing or unknown (`invalid_request`)"),
                  415: _error("Not multipart/form-data (`unsupported_media_type`)"),
                  422: _error("The recording breaks a rule (`consent_invalid`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/audio/voice_consents/{id}", "getVoiceConsent",
              "A pending consent of the caller's tenant", tag="voices", answers={
                  200: _json("VoiceConsent", "The consent"), 404: _NO_CONSENT,
                  503: _STORE_DOWN}),
    Operation("delete", "/v1/audio/voice_consents/{id}", "deleteVoiceConsent",
              "Delete a pending consent and its recording", tag="voices", answers={
                  200: _json("ConsentDeleted", "Deleted"), 404: _NO_CONSENT,
                  503: _STORE_DOWN}),
    Operation("post", "/v1/audio/voices", "createCustomVoice",
              "Register a voice from a sample and a consent (OpenAI's shape)", tag="voices",
              body={"multipart/form-data": ref("CustomVoiceUpload")}, answers={
                  201: _json("CustomVoice", "Registered in the caller's tenant"),
                  400: _error("`name` is not a voice ID (`invalid_request`), or `consent` "
                              "is missing (`consent_required`)"),
                  404: _NO_CONSENT,
                  415: _error("Not multipart/form-data (`unsupported_media_type`)"),
                  422: _error("The sample breaks a rule (`reference_invalid`), or the "
                              "consent's speaker is not the sample's (`consent_mismatch`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/voices/{id}", "getVoice", "One voice", tag="voices", answers={
        200: _json("Voice", "The voice"), 400: _BAD_ID,
        404: _error("The voice is not registered (`voice_not_found`)"), 503: _STORE_DOWN}),
    Operation("delete", "/v1/voices/{id}", "deleteVoice",
              "Delete a voice: its objects, and a tombstone on tts.voices", tag="voices",
              answers={200: _json("VoiceDeleted", "Deleted"), 400: _BAD_ID,
                       404: _error("The voice is not registered (`voice_not_found`)"),
                       503: _STORE_DOWN}),
    Operation("post", "/v1/jobs", "createJob", "Run a video script as a job", tag="jobs",
              body={JSON: ref("JobScript")}, example=JOB_EXAMPLE, answers={
                  200: _json("JobQueued", "The script is unchanged since the job's latest "
                                          "version: nothing produced (`status: unchanged`)"),
                  202: _json("JobQueued", "Stored and produced to tts.requests: version 1, "
                                          "or the next version's changed and failed lines"),
                  400: _error("The body is not JSON (`invalid_json`), a line breaks a rule "
                              "(`invalid_request`, the message names the line), or voices are "
                              "not registered (`voice_not_found`, `voices` lists them)"),
                  409: _error("A revision that would produce no line (lines only "
                              "removed) or that does not fit the job's versions "
                              "(`invalid_request`)"),
                  429: _QUOTA,
                  503: _STORE_DOWN}),
    Operation("get", "/v1/jobs/{id}", "getJob", "A job's state", tag="jobs", answers={
        200: Answer("The finished job, or a running one's progress",
                    {JSON: {"anyOf": [ref("JobFinished"), ref("JobRunning")]}}),
        400: _BAD_ID, 404: _error("No such job (`job_not_found`)"), 503: _STORE_DOWN}),
    Operation("post", "/v1/jobs/{id}/rerun", "rerunJob",
              "Re-run lines of a finished job as its next version (`job rerun`)", tag="jobs",
              body={JSON: ref("JobRerun")}, example={"failed": True}, answers={
                  202: _json("JobQueued", "The next version stored and its lines produced to "
                                          "tts.requests: `version`, `lines`"),
                  400: _error("The body is not JSON (`invalid_json`), breaks a rule or names "
                              "nothing to re-run (`invalid_request`), or a voice of the job "
                              "is no longer registered (`voice_not_found`)"),
                  404: _error("The job was never stored (`job_not_found`)"),
                  409: _error("A version of the job is still open, or a line index is "
                              "outside the job (`invalid_request`); or nothing would be "
                              "produced: `failed` with every line holding audio "
                              "(`nothing_to_rerun`)"),
                  429: _QUOTA,
                  503: _error("Kafka refused the requests (`kafka_error`) or the object "
                              "store is down (`storage_unavailable`); retry after "
                              "Retry-After", "Retry-After")}),
    Operation("post", "/v1/jobs/{id}/cancel", "cancelJob",
              "Cancel a job's lines not yet synthesized (`voicefactory cancel --job`)",
              tag="jobs", answers={
                  202: _json("JobCancelled", "The cancel is on tts.control; the lines not "
                                             "yet synthesized are answered `cancelled`"),
                  400: _BAD_ID,
                  404: _error("No such job (`job_not_found`)"),
                  503: _error("Kafka refused the cancel (`kafka_error`) or the object store "
                              "is down (`storage_unavailable`); retry after Retry-After",
                              "Retry-After")}),
    Operation("get", "/v1/voices/{id}/reference", "getVoiceReference",
              "A voice's reference clip, in its own audio type", tag="voices", answers={
                  200: Answer("The stored reference", _CLIP_AUDIO),
                  400: _BAD_ID,
                  404: _error("The voice is not registered (`voice_not_found`), or its "
                              "reference is not in this store (`reference_not_found`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/jobs/{id}/subtitles", "getJobSubtitles",
              "The latest finished version's SRT", tag="jobs", answers={
                  200: Answer("The SubRip file, as an attachment",
                              {"application/x-subrip": {"type": "string"}},
                              ("Content-Disposition",)),
                  400: _BAD_ID,
                  404: _error("No finished version (`job_not_found`), or it has no "
                              "subtitles (`subtitles_not_found`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/jobs/{id}/clips/{index}", "getJobClip",
              "One line's clip of the latest finished version", tag="jobs",
              parameters=(_INDEX,), answers={
                  200: Answer("The clip, in its own audio type", _CLIP_AUDIO),
                  400: _BAD_ID,
                  404: _error("No finished version (`job_not_found`), or no clip of this "
                              "line in this gateway's store (`clip_not_found`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/jobs/{id}/clips.zip", "getJobClipsZip",
              "Every clip of the latest finished version, zipped (stored)", tag="jobs",
              answers={
                  200: Answer("{line:04d}-{request_id}.{format} per clip, as an attachment",
                              {"application/zip": {"type": "string", "format": "binary"}},
                              ("Content-Disposition",)),
                  400: _BAD_ID, 404: _NO_JOB,
                  413: _error("The clips are over 512 MiB (`zip_too_large`): fetch them "
                              "one by one"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/jobs/{id}/timeline", "getJobTimeline",
              "Each line's start and end in the latest finished version's track", tag="jobs",
              answers={200: _json("JobTimeline", "The timeline"), 400: _BAD_ID,
                       404: _NO_JOB, 503: _STORE_DOWN}),
    Operation("get", "/v1/usage", "getUsage",
              "The caller's tenant's usage of a month, as the aggregator last published it",
              tag="usage", parameters=(_MONTH,), answers={
                  200: _json("UsageAnswer", "Audio and engine seconds, distinct requests, "
                                            "the quota and what is left of it"),
                  400: _error("`month` is not YYYY-MM (`invalid_request`)"),
                  500: _error("A usage report is unreadable (`usage_unreadable`)"),
                  503: _STORE_DOWN}),
    Operation("get", "/v1/fleet", "getFleet",
              "The workers' statuses, the interactive lane's lag and this replica's errors",
              tag="fleet", answers={200: _json("Fleet", "What this replica reads")}),
    Operation("get", "/openapi.json", "openapi", "This document", answers={
        200: Answer("OpenAPI 3.1", {JSON: {"type": "object"}})}),
)

# Refusals of the guard in front of every /v1 route (consumers.gateway.app.Guard).
_GUARDED = {
    401: _error("No key (`missing_api_key`), an unknown or a revoked one "
                "(`invalid_api_key`)"),
    403: _error("The key lacks the route's scope (`missing_scope`; `error.scope` names it)"),
    429: _error("Over the tenant's rate (`rate_limited`)", "Retry-After"),
}
_TOO_LARGE = _error("The body is over the limit (`body_too_large`): VF_GATEWAY_MAX_BODY_BYTES, "
                    "VF_GATEWAY_MAX_UPLOAD_BYTES for voice uploads")


def _answers(op: Operation) -> dict[str, Any]:
    answers = dict(op.answers)
    if op.authenticated:
        answers = {**_GUARDED, **answers}
        if op.body is not None:
            answers.setdefault(413, _TOO_LARGE)
    out: dict[str, Any] = {}
    for status in sorted(answers):
        answer = answers[status]
        response: dict[str, Any] = {"description": answer.description}
        if answer.content:
            response["content"] = {media: {"schema": schema}
                                   for media, schema in answer.content.items()}
        if answer.headers:
            response["headers"] = {name: {"$ref": f"#/components/headers/{name}"}
                                   for name in answer.headers}
        out[str(status)] = response
    return out


def _operation(op: Operation) -> dict[str, Any]:
    spec: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary,
                            "tags": [op.tag], "responses": _answers(op)}
    if "{id}" in op.path:
        kind = "voice" if op.path.startswith("/v1/voices") else \
            "consent" if op.path.startswith("/v1/audio/") else "job"
        spec["parameters"] = [{**_ID, "description": f"The {kind} ID",
                               "schema": ref("JobId" if kind == "job" else "VoiceId")}]
    if op.parameters:
        spec["parameters"] = [*spec.get("parameters", []), *op.parameters]
    if op.body is not None:
        spec["requestBody"] = {"required": True, "content": {
            media: {"schema": schema, **({"example": op.example} if op.example else {})}
            for media, schema in op.body.items()}}
    spec["security"] = [{"bearer": []}] if op.authenticated else []
    if op.authenticated:  # any one of them will do (consumers.gateway.scopes)
        spec["x-vf-scopes"] = list(scopes.needed(op.method.upper(), op.path))
    return spec


def paths() -> dict[str, dict[str, Any]]:
    """The document's `paths`: each route's operations by method, in `OPERATIONS` order."""
    out: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        out.setdefault(op.path, {})[op.method] = _operation(op)
    return out
