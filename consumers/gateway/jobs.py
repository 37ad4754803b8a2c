"""Jobs over HTTP: the CLI's job flow behind /v1/jobs, in the caller's tenant.

POST /v1/jobs (a script as JSON, what `job run` reads) -> `parse_script` (400) -> `JobScript`
  (400 naming the field, resources.refusal) -> the tenant's monthly quota (429
  `quota_exceeded`, consumers.gateway.usage; rerun too) ->
  `consumers.clients.jobs.submit`, the very operation of `job run` (400 naming unknown
  voices; version 1 of a new job, or the next version of a finished one with only its
  changed or failed lines, docs/jobs.md) -> the audit event -> requests on tts.requests
  (202, with the version and the lines produced); an unchanged script produces nothing
  (200, "unchanged").
POST /v1/jobs/{id}/rerun (`{"failed": true}` and/or `{"lines": [3, 7]}`) ->
  `consumers.clients.jobs.submit_rerun`, the very operation of `job rerun` (the latest
  finished version's own script: its lines without audio and/or those named) -> the audit
  event -> the next version's requests on tts.requests (202, like POST /v1/jobs); 404 for a
  job never stored, 409 while a version is still open or when nothing would be produced.
GET /v1/jobs/{id}: the latest version's job.json once the aggregator closed it (status,
  clips, subtitles link; links presigned afresh for the caller's own objects), else
  "running" with the lines answered so far (`consumers.gateway.progress` reads the job's
  tts.results partition from the script's creation time).
POST /v1/jobs/{id}/cancel -> a tts.control cancel of the job (202): its lines not yet
  synthesized are answered `cancelled` (docs/lanes.md); 404 for a job never stored.
The store is synchronous (minio): its calls run in a thread, off the event loop. What these
routes share with the voices routes (tenant, path ID, answers, 404s) is in
consumers.gateway.resources; the bodies and answers below are published by
consumers.gateway.openapi.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, UnsetType
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.clients.jobs import UnknownVoices, submit, submit_rerun
from consumers.clients.revisions import RevisionError, UnknownJob, latest_finished
from consumers.gateway.progress import job_progress
from consumers.gateway.resources import (
    job_not_found,
    json_answer,
    path_id,
    refusal,
    tenant_of_request,
)
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from consumers.gateway.speech import SPACE, LanguageTag, VoiceId
from consumers.gateway.usage import over_quota
from pipeline import keys
from pipeline.jobscript import ScriptError, decode_manifest, parse_script
from pipeline.storage import ObjectStore
from pipeline.voices import owns_key
from topics.control import cancel, control_key
from topics.events import AudioFormat, AudioRef, JobClip, JobStatus, Mode, encode
from topics.jsonschema import ID_PATTERN
from topics.validation import REQUEST_ID_MAX

MAX_LINES = 10_000  # pipeline.jobscript: a job holds at most this many lines
Speed = Annotated[float, msgspec.Meta(ge=0.5, le=2.0)]
SampleRate = Literal[16000, 22050, 24000, 44100, 48000]  # topics.validation.SAMPLE_RATES


# -- bodies ------------------------------------------------------------------------------------

class ScriptLine(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One line of a job script (docs/jobs.md); `voice` may come from the script."""

    text: Annotated[str, msgspec.Meta(pattern=f"[^{SPACE}]", description=(
        "At most 2,000 characters once whitespace runs are collapsed to one space"))]
    voice: VoiceId | UnsetType = UNSET  # null is not "absent" here: parse_script refuses it
    instruct: str | None = None
    language: LanguageTag | None = None
    format: AudioFormat | None = None
    sample_rate: SampleRate | None = None
    speed: Speed | None = None
    metadata: dict[str, Any] | None = None  # <= 4 KiB as JSON, echoed in the results
    mode: Mode | None = None


class JobScript(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/jobs: a video script as JSON, what `voicefactory job run` reads."""

    job_id: Annotated[str, msgspec.Meta(min_length=1, max_length=REQUEST_ID_MAX - 5,
                                        pattern=ID_PATTERN)]
    lines: Annotated[list[ScriptLine], msgspec.Meta(min_length=1, max_length=MAX_LINES)]
    voice: VoiceId | UnsetType = UNSET  # the default of every line
    language: LanguageTag | None = None
    format: AudioFormat | None = None
    gap_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    concat: bool | None = None
    track_format: AudioFormat = "wav"


class JobRerun(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/jobs/{id}/rerun: what `job rerun JOB --failed --lines 3,7` takes; at least
    one of the two (`failed` true or a line named)."""

    failed: bool = False  # the lines without audio: failed, rejected, expired, missing
    # 0-based indices, as the job event's clips[].index
    lines: Annotated[list[Annotated[int, msgspec.Meta(ge=0, lt=MAX_LINES)]],
                     msgspec.Meta(max_length=MAX_LINES)] = msgspec.field(default_factory=list)


# -- answers -----------------------------------------------------------------------------------

class JobQueued(msgspec.Struct, kw_only=True):
    """POST /v1/jobs: a version produced (202), or an unchanged script (200, nothing
    produced); `lines` are the indices a revision produced (docs/jobs.md)."""

    id: str
    object: Literal["job"]
    status: Literal["queued", "unchanged"]
    version: int
    total: int
    url: str
    lines: list[int] | None  # None for version 1 (every line)
    message: str


class JobFinished(msgspec.Struct, kw_only=True):
    """A job the aggregator closed: its job.json (tts.job.v1), subtitles presigned."""

    id: str
    object: Literal["job"]
    status: JobStatus
    version: int
    total: int
    done: int
    missing: list[int]
    duration_s: float
    subtitles: str | None  # a presigned URL of the .srt
    clips: list[JobClip]
    track: AudioRef | None


class LineProgress(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One answered line of a running job: its latest status, and its error code when it did
    not succeed."""

    index: int  # 0-based line of the script
    status: str  # succeeded | failed (topics.events.SynthesisResult.status)
    code: str | None = None  # topics.errors.ErrorCode of a line that did not succeed


class JobRunning(msgspec.Struct, kw_only=True):
    """A job still open: its lines answered so far, read from tts.results."""

    id: str
    object: Literal["job"]
    status: Literal["running"]
    version: int
    total: int
    carried: int  # clips taken over from the previous version (docs/jobs.md)
    done: int
    succeeded: int
    failed: int
    progress_complete: bool  # False: the read stopped at its time limit
    # Each answered line, in line order (at most one per line); absent from older gateways.
    lines: list[LineProgress] = msgspec.field(default_factory=list)


class JobCancelled(msgspec.Struct, kw_only=True):
    """POST /v1/jobs/{id}/cancel: the cancel is on tts.control; the job's lines not yet
    synthesized are answered `cancelled` and the job closes with them (docs/lanes.md)."""

    id: str
    object: Literal["job"]
    status: Literal["cancelling"]


def _whole_numbers(doc: Any) -> Any:
    """JSON has one number type: 1081.0 is the whole number the schema's "integer" takes, but
    orjson reads it as a float, which the script's int fields refuse."""
    lines = doc.get("lines") if isinstance(doc, dict) else None
    for part in [doc, *(lines if isinstance(lines, list) else [])]:
        for name in ("gap_ms", "sample_rate"):
            value = part.get(name) if isinstance(part, dict) else None
            if isinstance(value, float) and value.is_integer():
                part[name] = int(value)
    return doc


async def create_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        doc = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return json_error(400, f"the body is not JSON: {exc}", "invalid_json")
    try:
        script = parse_script(_whole_numbers(doc), source="body")
    except ScriptError as exc:
        return json_error(400, str(exc), "invalid_request")
    try:
        msgspec.convert(doc, JobScript)
    except msgspec.ValidationError as exc:
        return refusal(exc)
    if (over := await over_quota(gw.usage, request.state.tenant)) is not None:
        return over  # before the manifest is stored: a refused job leaves nothing behind
    try:
        submission = await asyncio.to_thread(functools.partial(
            submit, gw.store, script, tenant=tenant_of_request(request)))
    except UnknownVoices as exc:
        return json_error(400, str(exc), "voice_not_found", param="lines", voices=exc.missing)
    except RevisionError as exc:
        return json_error(409, str(exc), "invalid_request")
    answer = JobQueued(id=script.job_id, object="job", status="queued",
                       version=submission.version, total=len(script.requests),
                       url=f"/v1/jobs/{script.job_id}",
                       lines=sorted(submission.reasons) if submission.version > 1 else None,
                       message=submission.describe())
    if submission.unchanged:
        return json_answer(msgspec.structs.replace(answer, status="unchanged", lines=[]))
    await gw.audit.record(request, "job.submit", script.job_id)  # before any request
    await gw.produce(gw.names.requests, submission.requests)
    return json_answer(answer, 202)


async def rerun_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = path_id(request, "job_id", REQUEST_ID_MAX)
    if isinstance(job_id, Response):
        return job_id
    try:
        doc = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return json_error(400, f"the body is not JSON: {exc}", "invalid_json")
    if isinstance(doc, dict) and isinstance(doc.get("lines"), list):  # 3.0 is line 3
        doc["lines"] = [int(i) if isinstance(i, float) and i.is_integer() else i
                        for i in doc["lines"]]
    try:
        body = msgspec.convert(doc, JobRerun)
    except msgspec.ValidationError as exc:
        return refusal(exc)
    if not body.failed and not body.lines:
        return json_error(400, "say what to re-run: `failed: true` and/or `lines`",
                          "invalid_request")
    if (over := await over_quota(gw.usage, request.state.tenant)) is not None:
        return over
    try:
        submission = await asyncio.to_thread(submit_rerun, gw.store, job_id,
                                             failed=body.failed, lines=frozenset(body.lines),
                                             tenant=tenant_of_request(request))
    except UnknownJob:
        return job_not_found(job_id)
    except UnknownVoices as exc:  # deleted since the version ran
        return json_error(400, str(exc), "voice_not_found", param="lines", voices=exc.missing)
    except (RevisionError, ScriptError) as exc:
        return json_error(409, str(exc), "invalid_request")
    if submission.unchanged:
        return json_error(409, submission.describe(), "nothing_to_rerun")
    await gw.audit.record(request, "job.rerun", job_id)
    await gw.produce(gw.names.requests, submission.requests)
    return json_answer(JobQueued(id=job_id, object="job", status="queued",
                           version=submission.version, total=submission.manifest.total,
                           url=f"/v1/jobs/{job_id}", lines=sorted(submission.reasons),
                           message=submission.describe()), 202)


async def job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = path_id(request, "job_id", REQUEST_ID_MAX)
    if isinstance(job_id, Response):
        return job_id
    tenant = tenant_of_request(request)
    done = await asyncio.to_thread(functools.partial(latest_finished, gw.store, job_id,
                                                     tenant=tenant))
    opened = (await asyncio.to_thread(
        gw.store.get, keys.job_script_key(job_id, done.version + 1, tenant=tenant))
              if done is not None else None)
    if done is not None and opened is None:
        event, version = done.event, done.version
        ttl = gw.settings.gateway.presign_seconds
        subtitles = None
        if event.subtitles:
            subtitles = await asyncio.to_thread(
                gw.store.presign, keys.job_subtitles_key(job_id, version, tenant=tenant), ttl)
        clips, track = await asyncio.to_thread(
            _fresh_links, gw.store, tenant, event.clips, event.track, ttl)
        return json_answer(JobFinished(id=job_id, object="job", status=event.status,
                                 version=version, total=event.total, done=len(event.clips),
                                 missing=event.missing, duration_s=event.duration_s,
                                 subtitles=subtitles, clips=clips, track=track))
    script = opened if opened is not None else await asyncio.to_thread(
        gw.store.get, keys.job_script_key(job_id, tenant=tenant))
    if script is None:
        return job_not_found(job_id)
    manifest = decode_manifest(script)
    progress = await job_progress(gw.settings.kafka, gw.names.results, job_id,
                                  manifest.created_at, version=manifest.version,
                                  tenant=tenant)
    return json_answer(JobRunning(id=job_id, object="job", status="running",
                            version=manifest.version, total=manifest.total,
                            carried=len(manifest.carried), done=progress.done,
                            succeeded=progress.succeeded,
                            failed=progress.done - progress.succeeded,
                            progress_complete=progress.complete,
                            lines=[LineProgress(index=i, status=st, code=code)
                                   for i, st, code in progress.lines()]))


def _fresh_links(store: ObjectStore, tenant: str, clips: list[JobClip],
                 track: AudioRef | None, ttl: int) -> tuple[list[JobClip], AudioRef | None]:
    """job.json's links were presigned by the worker and the aggregator for days: the answer
    gets links of the gateway's own short lifetime instead, and only for the caller's own
    objects in this store (anything else keeps its s3 key but loses its link)."""

    def fresh(ref: AudioRef) -> AudioRef:
        own = ref.bucket == store.bucket and owns_key(tenant, ref.key)
        return msgspec.structs.replace(ref, url=store.presign(ref.key, ttl) if own else "")

    return ([msgspec.structs.replace(c, audio=fresh(c.audio)) if c.audio is not None else c
             for c in clips], fresh(track) if track is not None else None)


async def cancel_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = path_id(request, "job_id", REQUEST_ID_MAX)
    if isinstance(job_id, Response):
        return job_id
    tenant = tenant_of_request(request)
    # Version 1's script exists for every job the tenant ever submitted.
    info = await asyncio.to_thread(gw.store.stat, keys.job_script_key(job_id, tenant=tenant))
    if info is None:
        return job_not_found(job_id)
    command = cancel(job_id=job_id, reason="cancelled through the gateway", tenant=tenant)
    assert gw.producer is not None
    await gw.producer.send_and_wait(gw.names.control, encode(command),
                                    key=control_key(command))
    return json_answer(JobCancelled(id=job_id, object="job", status="cancelling"), 202)


def routes() -> list[Route]:
    # One route per path, so that a 405's Allow names every method the path takes.
    return [Route("/v1/jobs", create_job, methods=["POST"]),
            Route("/v1/jobs/{id}", job, methods=["GET"]),
            Route("/v1/jobs/{id}/rerun", rerun_job, methods=["POST"]),
            Route("/v1/jobs/{id}/cancel", cancel_job, methods=["POST"])]
