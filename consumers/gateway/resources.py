"""Voices and jobs over HTTP: the CLI's registry and job flow behind /v1/voices and /v1/jobs.

POST /v1/voices (multipart: `reference` file, `transcript`, optional `voice_id`, `language`;
  the speaker's consent as a `consent` ID or a `consent_recording` file part)
  -> `check_reference` (422 with the verdict table as JSON when a rule fails; `?dry_run=1`
     stops here: 200 with the table, nothing stored or produced)
  -> consents.consented_voice (400 `consent_required`, 404 `consent_not_found`, 422
     `consent_invalid` / `consent_mismatch`) -> the audit event (`gw.audit.record`,
     consumers/gateway/audit.py; not written: 503) -> `register_voice` (the CLI's
     `voices add`), in the caller's tenant -> the event on tts.voices.
GET /v1/voices, GET /v1/voices/{id}: voice.json objects; DELETE: audit event, then
  `remove_voice` (the consent recording with it) + tombstone. A job's submission and
  re-run are audited before their requests are produced.
POST /v1/jobs (a script as JSON, what `job run` reads) -> `parse_script` (400) -> the
  tenant's monthly quota (429 `quota_exceeded`, consumers.gateway.usage; rerun too) ->
  `consumers.clients.jobs.submit`, the very operation of `job run` (400 naming unknown
  voices; version 1 of a new job, or the next version of a finished one with only its
  changed or failed lines, docs/jobs.md) -> requests on tts.requests (202, with the
  version and the lines produced); an unchanged script produces nothing (200, "unchanged").
POST /v1/jobs/{id}/rerun (`{"failed": true}` and/or `{"lines": [3, 7]}`) ->
  `consumers.clients.jobs.submit_rerun`, the very operation of `job rerun` (the latest
  finished version's own script: its lines without audio and/or those named) -> the next
  version's requests on tts.requests (202, like POST /v1/jobs); 404 for a job never stored,
  409 while a version is still open or when nothing would be produced.
GET /v1/jobs/{id}: the latest version's job.json once the aggregator closed it (status,
  clips, subtitles link), else "running" with the lines answered so far
  (`consumers.gateway.progress` reads the job's tts.results partition from the script's
  creation time).
POST /v1/jobs/{id}/cancel -> a tts.control cancel of the job (202): its lines not yet
  synthesized are answered `cancelled` (docs/lanes.md); 404 for a job never stored.
The store is synchronous (minio): its calls run in a thread, off the event loop.

Tenancy (docs/gateway.md, "Tenants"): every route works inside the caller's tenant, the one
its API key names (`request.state.tenant`); a `tenant` in a body is never read. Voices, jobs
and their objects are looked up under the tenant's root (pipeline/keys.py), so another
tenant's ID is simply not found: the 404 is the one an unknown ID gets, same code, same
words. The records produced carry the tenant; presigned links (a job's clips and
subtitles) are made fresh for the caller's own objects, valid VF_GATEWAY_PRESIGN_SECONDS.

The bodies and answers are msgspec types (`VoiceForm`, `JobScript`, `Voice`, `JobFinished`,
...): consumers.gateway.openapi publishes them, the answers are encoded from them, and a body
is converted to its type after the CLI's own checks, so one the schema refuses is refused.
"""

from __future__ import annotations

import asyncio
import functools
import re
import uuid
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, UnsetType
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.clients.jobs import UnknownVoices, submit, submit_rerun
from consumers.clients.revisions import RevisionError, UnknownJob, latest_finished
from consumers.gateway import consents
from consumers.gateway.keys import Tenant
from consumers.gateway.progress import job_progress
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from consumers.gateway.speech import NO_NUL, SPACE, LanguageTag, VoiceId
from consumers.gateway.usage import over_quota
from pipeline import keys
from pipeline.consent import ConsentError
from pipeline.jobscript import ScriptError, decode_manifest, parse_script
from pipeline.reference import ReferenceReport, check_reference
from pipeline.storage import ObjectStore
from pipeline.voices import (
    list_voices,
    owns_key,
    read_voice,
    remove_voice,
    voice_topic_key,
)
from topics.control import cancel, control_key
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import (
    AudioFormat,
    AudioRef,
    JobClip,
    JobStatus,
    Mode,
    VoiceRegistration,
    encode,
)
from topics.jsonschema import ID_PATTERN
from topics.validation import MAX_TEXT_CHARS, REQUEST_ID_MAX, VOICE_ID_MAX, check_id

DRY_RUN = {"1": True, "true": True, "0": False, "false": False}  # POST /v1/voices?dry_run=
MAX_LINES = 10_000  # pipeline.jobscript: a job holds at most this many lines
Speed = Annotated[float, msgspec.Meta(ge=0.5, le=2.0)]
SampleRate = Literal[16000, 22050, 24000, 44100, 48000]  # topics.validation.SAMPLE_RATES


# -- bodies ------------------------------------------------------------------------------------

class VoiceForm(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The text parts of a voice upload (multipart, beside the `reference` file part); a
    form has no null, so an absent part is UNSET."""

    voice_id: VoiceId | UnsetType = UNSET  # absent: voice-<12 hex digits>
    # The reference's transcript: seconds of speech, and it travels in the tts.voices event.
    transcript: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS, pattern=NO_NUL)] \
        | UnsetType = UNSET
    language: LanguageTag | UnsetType = UNSET
    # The speaker's consent (docs/voices.md): an ID from POST /v1/audio/voice_consents, or
    # a `consent_recording` file part with the speaker's name and the statement read.
    consent: VoiceId | UnsetType = UNSET
    consent_speaker: Annotated[str, msgspec.Meta(min_length=1, max_length=200,
                                                 pattern=NO_NUL)] | UnsetType = UNSET
    consent_statement: Annotated[str, msgspec.Meta(max_length=1000, pattern=NO_NUL)] \
        | UnsetType = UNSET


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

class RuleCheck(msgspec.Struct, kw_only=True):
    """One rule of the reference check (pipeline.reference) and its verdict."""

    rule: str
    ok: bool
    measured: str
    limit: str
    advisory: bool  # reported, never a rejection
    problem: str | None


class Voice(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["voice"]
    language: str | None
    transcript: str | None
    sha256: str
    created_at: str


class VoiceCreated(Voice, kw_only=True):
    checks: list[RuleCheck]


class VoiceCheck(msgspec.Struct, kw_only=True):
    """POST /v1/voices?dry_run=1: the reference passed every rule; nothing was stored."""

    id: str
    object: Literal["voice.check"]
    ok: bool
    checks: list[RuleCheck]


class VoiceList(msgspec.Struct, kw_only=True):
    object: Literal["list"]
    data: list[Voice]


class VoiceDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["voice"]
    deleted: bool
    objects: int  # objects removed from the store: reference, voice.json, profiles


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


def _json(obj: msgspec.Struct, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status, media_type="application/json")


_AT_FIELD = re.compile(r"at `\$\.([A-Za-z_]+)")


def refusal(exc: msgspec.ValidationError) -> Response:
    """A body the CLI's checks passed but its published type refuses: 400 naming the field."""
    found = _AT_FIELD.search(str(exc))
    return json_error(400, f"{exc} (see /openapi.json)", "invalid_request",
                      param=found.group(1) if found else None)


def _voice(event: VoiceRegistration) -> Voice:
    return Voice(id=event.voice_id, object="voice", language=event.language,
                 transcript=event.prompt_text, sha256=event.sha256,
                 created_at=event.created_at)


def verdict_table(report: ReferenceReport) -> list[RuleCheck]:
    return [RuleCheck(rule=c.rule, ok=c.ok, measured=c.measured, limit=c.limit,
                      advisory=c.advisory, problem=c.problem or None) for c in report.checks]


def tenant_of_request(request: Request) -> str:
    """The caller's tenant, from its API key (the guard put it there; never from a body)."""
    tenant: Tenant = request.state.tenant
    return tenant.name


async def create_voice(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    tenant = tenant_of_request(request)
    dry_run = DRY_RUN.get(request.query_params.get("dry_run", "0"))
    if dry_run is None:
        return json_error(400, "dry_run is 1, true, 0 or false", "invalid_request",
                          param="dry_run")
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "multipart/form-data":
        return json_error(415, "POST /v1/voices takes multipart/form-data with a `reference` "
                               "file", "unsupported_media_type")
    limit = gw.settings.gateway.max_upload_bytes
    async with request.form(max_files=2, max_fields=8, max_part_size=limit) as form:
        upload = form.get("reference")
        if not isinstance(upload, UploadFile):
            return json_error(400, "the `reference` file part is missing", "invalid_request",
                              param="reference")
        data = await upload.read()
        consent_upload = form.get("consent_recording")
        recording = (await consent_upload.read()
                     if isinstance(consent_upload, UploadFile) else None)
        # Every other part is a text part VoiceForm names: a typo is an error, not ignored.
        parts = {k: v for k, v in form.multi_items()
                 if k not in ("reference", "consent_recording")}
    try:
        if isinstance(parts.get("voice_id"), str):
            check_id("voice_id", str(parts["voice_id"]), VOICE_ID_MAX)
        form_fields = msgspec.convert(parts, VoiceForm)
    except msgspec.ValidationError as exc:  # before ValueError, which it is too
        return refusal(exc)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param="voice_id")
    voice_id = form_fields.voice_id or f"voice-{uuid.uuid4().hex[:12]}"
    report = await asyncio.to_thread(check_reference, data)
    checks = verdict_table(report)
    if not report.ok:
        return json_error(422, "; ".join(report.problems), "reference_invalid",
                          param="reference", checks=msgspec.to_builtins(checks))
    if dry_run:
        return _json(VoiceCheck(id=voice_id, object="voice.check", ok=True, checks=checks))
    assert report.audio is not None  # report.ok
    tenant = consents.tenant_of_request(request)
    try:
        ref = await asyncio.to_thread(
            consents.consented_voice, gw.store, voice_id=voice_id, sample=report.audio,
            threshold=gw.settings.gateway.consent_threshold, tenant=tenant,
            consent_id=form_fields.consent or None, recording=recording,
            speaker=form_fields.consent_speaker or None,
            statement=form_fields.consent_statement or None,
            language=form_fields.language or None)
    except ConsentError as exc:
        return consents.consent_error(exc)
    event = await consents.publish(gw, request, voice_id=voice_id, reference=data, consent=ref,
                                   tenant=tenant, prompt_text=form_fields.transcript or None,
                                   language=form_fields.language or None)
    if isinstance(event, Response):
        return event
    return _json(VoiceCreated(**msgspec.structs.asdict(_voice(event)), checks=checks), 201)


async def get_voices(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voices = await asyncio.to_thread(functools.partial(
        list_voices, gw.store, tenant=tenant_of_request(request)))
    return _json(VoiceList(object="list", data=[_voice(v) for v in voices]))


def _path_id(request: Request, name: str, limit: int) -> str | Response:
    value = request.path_params["id"]
    try:
        return check_id(name, value, limit)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param=name)


async def voice(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voice_id = _path_id(request, "voice_id", VOICE_ID_MAX)
    if isinstance(voice_id, Response):
        return voice_id
    tenant = tenant_of_request(request)
    if request.method == "DELETE":
        # Audited only for a voice that exists: a trail of deletes answered 404 says nothing.
        if await asyncio.to_thread(gw.store.stat,
                                   keys.voice_json_key(voice_id, tenant=tenant)) is not None:
            await gw.audit.record(request, "voice.delete", voice_id)
        try:
            removed = await asyncio.to_thread(functools.partial(
                remove_voice, gw.store, voice_id, tenant=tenant))
        except VoiceFactoryError as exc:
            if exc.code != ErrorCode.VOICE_NOT_FOUND:
                raise  # a store outage is the app's 503, not a 404
            return voice_not_found(voice_id)
        assert gw.producer is not None
        await gw.producer.send_and_wait(gw.names.voices, None,
                                        key=voice_topic_key(voice_id, tenant))
        return _json(VoiceDeleted(id=voice_id, object="voice", deleted=True, objects=removed))
    event = await asyncio.to_thread(functools.partial(read_voice, gw.store, voice_id,
                                                      tenant=tenant))
    if event is None:
        return voice_not_found(voice_id)
    return _json(_voice(event))


def voice_not_found(voice_id: str) -> Response:
    """The one 404 of a voice the caller cannot see: unknown and another tenant's alike."""
    return json_error(404, f"voice {voice_id!r} is not registered", "voice_not_found")


def job_not_found(job_id: str) -> Response:
    """The one 404 of a job the caller cannot see: unknown and another tenant's alike."""
    return json_error(404, f"job {job_id!r} is unknown", "job_not_found")


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
        return _json(msgspec.structs.replace(answer, status="unchanged", lines=[]))
    await gw.audit.record(request, "job.submit", script.job_id)  # before any request
    await gw.produce(gw.names.requests, submission.requests)
    return _json(answer, 202)


async def rerun_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = _path_id(request, "job_id", REQUEST_ID_MAX)
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
    return _json(JobQueued(id=job_id, object="job", status="queued",
                           version=submission.version, total=submission.manifest.total,
                           url=f"/v1/jobs/{job_id}", lines=sorted(submission.reasons),
                           message=submission.describe()), 202)


async def job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = _path_id(request, "job_id", REQUEST_ID_MAX)
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
        return _json(JobFinished(id=job_id, object="job", status=event.status,
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
    return _json(JobRunning(id=job_id, object="job", status="running",
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


class JobCancelled(msgspec.Struct, kw_only=True):
    """POST /v1/jobs/{id}/cancel: the cancel is on tts.control; the job's lines not yet
    synthesized are answered `cancelled` and the job closes with them (docs/lanes.md)."""

    id: str
    object: Literal["job"]
    status: Literal["cancelling"]


async def cancel_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = _path_id(request, "job_id", REQUEST_ID_MAX)
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
    return _json(JobCancelled(id=job_id, object="job", status="cancelling"), 202)


async def voices(request: Request) -> Response:
    return await (create_voice if request.method == "POST" else get_voices)(request)


def routes() -> list[Route]:
    # One route per path, so that a 405's Allow names every method the path takes.
    return [Route("/v1/voices", voices, methods=["GET", "POST"]),
            Route("/v1/voices/{id}", voice, methods=["GET", "DELETE"]),
            Route("/v1/jobs", create_job, methods=["POST"]),
            Route("/v1/jobs/{id}", job, methods=["GET"]),
            Route("/v1/jobs/{id}/rerun", rerun_job, methods=["POST"]),
            Route("/v1/jobs/{id}/cancel", cancel_job, methods=["POST"])]
