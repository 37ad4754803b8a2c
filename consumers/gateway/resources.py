"""Voices and jobs over HTTP: the CLI's registry and job flow behind /v1/voices and /v1/jobs.

POST /v1/voices (multipart: `reference` file, `transcript`, optional `voice_id`, `language`)
  -> `check_reference` (422 with the verdict table as JSON when a rule fails; `?dry_run=1`
     stops here: 200 with the table, nothing stored or produced)
  -> `register_voice` (the CLI's `voices add`) -> the event on tts.voices.
GET /v1/voices, GET /v1/voices/{id}: voice.json objects; DELETE: `remove_voice` + tombstone.
POST /v1/jobs (a script as JSON, what `job run` reads) -> `parse_script` (400) ->
  `put_manifest` (409 when the job ID already finished) -> requests on tts.requests (202).
GET /v1/jobs/{id}: job.json once the aggregator closed the job (status, clips, subtitles
  link), else "running" with the lines answered so far (`consumers.gateway.progress` reads
  the job's tts.results partition from the script's creation time).
The store is synchronous (minio): its calls run in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import orjson
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.aggregator.state import decode_manifest
from consumers.clients.jobs import JobAlreadyFinished, UnknownVoices, check_voices, put_manifest
from consumers.clients.scripts import ScriptError, parse_script
from consumers.gateway.progress import job_progress
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from pipeline import keys
from pipeline.reference import ReferenceReport, check_reference
from pipeline.voices import list_voices, register_voice, remove_voice
from topics.errors import VoiceFactoryError
from topics.events import JobCompleted, VoiceRegistration, encode
from topics.validation import REQUEST_ID_MAX, VOICE_ID_MAX, check_id


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status, media_type="application/json")


def _voice(event: VoiceRegistration) -> dict[str, Any]:
    return {"id": event.voice_id, "object": "voice", "language": event.language,
            "transcript": event.prompt_text, "sha256": event.sha256,
            "created_at": event.created_at}


def verdict_table(report: ReferenceReport) -> list[dict[str, Any]]:
    return [{"rule": c.rule, "ok": c.ok, "measured": c.measured, "limit": c.limit,
             "advisory": c.advisory, "problem": c.problem or None} for c in report.checks]


async def create_voice(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        return json_error(415, "POST /v1/voices takes multipart/form-data with a `reference` "
                               "file", "unsupported_media_type")
    limit = gw.settings.gateway.max_upload_bytes
    async with request.form(max_files=1, max_fields=8, max_part_size=limit) as form:
        upload = form.get("reference")
        if not isinstance(upload, UploadFile):
            return json_error(400, "the `reference` file part is missing", "invalid_request",
                              param="reference")
        data = await upload.read()
        fields = {k: form.get(k) for k in ("voice_id", "transcript", "language")}
    texts = {k: v for k, v in fields.items() if isinstance(v, str) and v}
    voice_id = texts.get("voice_id") or f"voice-{uuid.uuid4().hex[:12]}"
    try:
        check_id("voice_id", voice_id, VOICE_ID_MAX)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param="voice_id")
    report = await asyncio.to_thread(check_reference, data)
    if not report.ok:
        return json_error(422, "; ".join(report.problems), "reference_invalid",
                          param="reference", checks=verdict_table(report))
    if request.query_params.get("dry_run") in ("1", "true"):
        return _json({"id": voice_id, "object": "voice.check", "ok": True,
                      "checks": verdict_table(report)})
    try:
        event = await asyncio.to_thread(
            register_voice, gw.store, voice_id=voice_id, reference=data,
            prompt_text=texts.get("transcript"), language=texts.get("language"))
    except VoiceFactoryError as exc:
        return json_error(422, str(exc), str(exc.code), param="reference")
    assert gw.producer is not None
    await gw.producer.send_and_wait(gw.names.voices, encode(event), key=voice_id.encode())
    return _json({**_voice(event), "checks": verdict_table(report)}, 201)


async def get_voices(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voices = await asyncio.to_thread(list_voices, gw.store)
    return _json({"object": "list", "data": [_voice(v) for v in voices]})


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
    if request.method == "DELETE":
        try:
            removed = await asyncio.to_thread(remove_voice, gw.store, voice_id)
        except VoiceFactoryError as exc:
            return json_error(404, str(exc), "voice_not_found")
        assert gw.producer is not None
        await gw.producer.send_and_wait(gw.names.voices, None, key=voice_id.encode())
        return _json({"id": voice_id, "object": "voice", "deleted": True, "objects": removed})
    raw = await asyncio.to_thread(gw.store.get, keys.voice_json_key(voice_id))
    if raw is None:
        return json_error(404, f"voice {voice_id!r} is not registered", "voice_not_found")
    return _json(_voice(msgspec.json.decode(raw, type=VoiceRegistration)))


async def create_job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        doc = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return json_error(400, f"the body is not JSON: {exc}", "invalid_json")
    try:
        script = parse_script(doc, source="body")
    except ScriptError as exc:
        return json_error(400, str(exc), "invalid_request")
    try:
        await asyncio.to_thread(check_voices, gw.store, script)
    except UnknownVoices as exc:
        return json_error(400, str(exc), "voice_not_found", param="lines", voices=exc.missing)
    try:
        await asyncio.to_thread(put_manifest, gw.store, script)
    except JobAlreadyFinished as exc:
        return json_error(409, str(exc), "job_finished")
    await gw.produce(gw.names.requests, script.requests)
    return _json({"id": script.job_id, "object": "job", "status": "queued",
                  "total": len(script.requests), "url": f"/v1/jobs/{script.job_id}"}, 202)


async def job(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    job_id = _path_id(request, "job_id", REQUEST_ID_MAX)
    if isinstance(job_id, Response):
        return job_id
    raw = await asyncio.to_thread(gw.store.get, keys.job_json_key(job_id))
    if raw is not None:
        event = msgspec.json.decode(raw, type=JobCompleted)
        subtitles = None
        if event.subtitles:
            subtitles = await asyncio.to_thread(gw.store.presign,
                                                keys.job_subtitles_key(job_id),
                                                gw.settings.store.presign_seconds)
        return _json({"id": job_id, "object": "job", "status": event.status,
                      "total": event.total, "done": len(event.clips), "missing": event.missing,
                      "duration_s": event.duration_s, "subtitles": subtitles,
                      "clips": [msgspec.to_builtins(c) for c in event.clips],
                      "track": msgspec.to_builtins(event.track) if event.track else None})
    script = await asyncio.to_thread(gw.store.get, keys.job_script_key(job_id))
    if script is None:
        return json_error(404, f"job {job_id!r} is unknown", "job_not_found")
    manifest = decode_manifest(script)
    progress = await job_progress(gw.settings.kafka, gw.names.results, job_id,
                                  manifest.created_at)
    return _json({"id": job_id, "object": "job", "status": "running",
                  "total": manifest.total, "done": progress.done,
                  "succeeded": progress.succeeded, "failed": progress.done - progress.succeeded,
                  "progress_complete": progress.complete})


def routes() -> list[Route]:
    return [Route("/v1/voices", create_voice, methods=["POST"]),
            Route("/v1/voices", get_voices, methods=["GET"]),
            Route("/v1/voices/{id}", voice, methods=["GET", "DELETE"]),
            Route("/v1/jobs", create_job, methods=["POST"]),
            Route("/v1/jobs/{id}", job, methods=["GET"])]
