"""Voices over HTTP: the CLI's registry behind /v1/voices, in the caller's tenant.

POST /v1/voices (multipart: `reference` file, `transcript`, optional `voice_id`, `language`;
  the speaker's consent as a `consent` ID or a `consent_recording` file part)
  -> `VoiceForm` (400 naming the part, resources.refusal)
  -> `check_reference` (422 with the verdict table as JSON when a rule fails; `?dry_run=1`
     stops here: 200 with the table, nothing stored or produced)
  -> consents.consented_voice (400 `consent_required`, 404 `consent_not_found`, 422
     `consent_invalid` / `consent_mismatch`) -> the audit event (`gw.audit.record`,
     consumers/gateway/audit.py; not written: 503) -> `register_voice` (the CLI's
     `voices add`), in the caller's tenant -> the event on tts.voices.
GET /v1/voices, GET /v1/voices/{id}: voice.json objects; DELETE: audit event, then
  `remove_voice` (the consent recording with it) + tombstone.
The store is synchronous (minio): its calls run in a thread, off the event loop. What these
routes share with the jobs routes (tenant, path ID, answers, 404s) is in
consumers.gateway.resources; the bodies and answers below are published by
consumers.gateway.openapi.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.gateway import consents
from consumers.gateway.resources import (
    json_answer,
    path_id,
    refusal,
    tenant_of_request,
    voice_not_found,
)
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from consumers.gateway.speech import NO_NUL, LanguageTag, VoiceId
from pipeline import keys
from pipeline.consent import ConsentError
from pipeline.reference import ReferenceReport, check_reference
from pipeline.voices import list_voices, read_voice, remove_voice, voice_topic_key
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import VoiceRegistration
from topics.validation import MAX_TEXT_CHARS, VOICE_ID_MAX, check_id

DRY_RUN = {"1": True, "true": True, "0": False, "false": False}  # POST /v1/voices?dry_run=


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


def _voice(event: VoiceRegistration) -> Voice:
    return Voice(id=event.voice_id, object="voice", language=event.language,
                 transcript=event.prompt_text, sha256=event.sha256,
                 created_at=event.created_at)


def verdict_table(report: ReferenceReport) -> list[RuleCheck]:
    return [RuleCheck(rule=c.rule, ok=c.ok, measured=c.measured, limit=c.limit,
                      advisory=c.advisory, problem=c.problem or None) for c in report.checks]


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
        return json_answer(VoiceCheck(id=voice_id, object="voice.check", ok=True, checks=checks))
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
    return json_answer(VoiceCreated(**msgspec.structs.asdict(_voice(event)), checks=checks), 201)


async def get_voices(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voices = await asyncio.to_thread(functools.partial(
        list_voices, gw.store, tenant=tenant_of_request(request)))
    return json_answer(VoiceList(object="list", data=[_voice(v) for v in voices]))


async def voice(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voice_id = path_id(request, "voice_id", VOICE_ID_MAX)
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
        return json_answer(VoiceDeleted(id=voice_id, object="voice", deleted=True, objects=removed))
    event = await asyncio.to_thread(functools.partial(read_voice, gw.store, voice_id,
                                                      tenant=tenant))
    if event is None:
        return voice_not_found(voice_id)
    return json_answer(_voice(event))


async def voices(request: Request) -> Response:
    return await (create_voice if request.method == "POST" else get_voices)(request)


def routes() -> list[Route]:
    # One route per path, so that a 405's Allow names every method the path takes.
    return [Route("/v1/voices", voices, methods=["GET", "POST"]),
            Route("/v1/voices/{id}", voice, methods=["GET", "DELETE"])]
