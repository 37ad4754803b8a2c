"""Consent to clone over HTTP: OpenAI's shapes beside /v1/voices (docs/voices.md, "Consent").

POST /v1/audio/voice_consents (multipart: `name` the speaker, `recording`, `language`,
  optional `statement`) -> pipeline.consent.create_consent under the caller's tenant
  (422 `consent_invalid` naming the rule) -> 201 `audio.voice_consent` {id, name, language,
  created_at}.
GET|DELETE /v1/audio/voice_consents/{id}: a pending consent of the caller's tenant; another
  tenant's ID, a used one and an unknown one are the same 404 `consent_not_found`.
POST /v1/audio/voices (multipart: `name` the voice ID, `consent` an ID, `audio_sample`)
  -> the sample's reference check (422 `reference_invalid`) -> `consented_voice`: the
     consent's recording against the sample (GE2E, VF_CONSENT_THRESHOLD; 422
     `consent_mismatch`), the recording moved under the voice -> register_voice with the
     ConsentRef -> the event on tts.voices -> 201 `audio.voice`.
POST /v1/voices uses `consented_voice` too, with a `consent` ID or a `consent_recording`
  file part (consumers.gateway.voices).
The speaker encoder loads on the first consent check, once per process, never at import;
the store and the encoder run in threads, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Literal

import msgspec
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.gateway.audit import AuditUnavailable
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from pipeline import consent as consents
from pipeline.audio import Audio
from pipeline.consent import ConsentError
from pipeline.reference import check_reference
from pipeline.speaker import SpeakerEncoder
from pipeline.storage import ObjectStore
from pipeline.voices import register_voice, voice_topic_key
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import ConsentRef, VoiceRegistration, encode
from topics.validation import VOICE_ID_MAX, check_id

# One per process, loaded by the first check (about 2 s and 100 MB): a gateway that never
# sees a consent never pays for it.
ENCODER = SpeakerEncoder()
STATUS = {"consent_invalid": 422, "consent_mismatch": 422, "consent_not_found": 404,
          "consent_required": 400}
MAX_TEXT_PARTS = 8


class VoiceConsent(msgspec.Struct, kw_only=True):
    """OpenAI's `audio.voice_consent`, with the statement and the recording's checks."""

    id: str
    object: Literal["audio.voice_consent"]
    name: str  # the speaker
    language: str | None
    created_at: int  # Unix seconds
    statement: str


class ConsentDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["audio.voice_consent"]
    deleted: bool


class CustomVoice(msgspec.Struct, kw_only=True):
    """OpenAI's `audio.voice`: the registered voice, with the consent that allowed it."""

    id: str
    object: Literal["audio.voice"]
    name: str
    created_at: int
    consent: str
    similarity: float  # GE2E cosine of the consent recording and the sample


def tenant_of_request(request: Request) -> str:
    return str(request.state.tenant.name)


def consent_error(exc: ConsentError) -> Response:
    param = {"consent_not_found": "consent", "consent_required": "consent",
             "consent_mismatch": "consent"}.get(exc.reason, "recording")
    return json_error(STATUS[exc.reason], exc.message, exc.reason, param=param)


def _unix(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp())


def _answer(obj: msgspec.Struct, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status, media_type="application/json")


def _consent_answer(record: consents.ConsentRecord) -> VoiceConsent:
    return VoiceConsent(id=record.id, object="audio.voice_consent", name=record.speaker,
                        language=record.language, created_at=_unix(record.recorded_at),
                        statement=record.statement)


def _multipart(request: Request, route: str, file_part: str) -> Response | None:
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "multipart/form-data":
        return json_error(415, f"POST {route} takes multipart/form-data with a `{file_part}` "
                               "file", "unsupported_media_type")
    return None


def _text(parts: Mapping[str, object], name: str, limit: int) -> str | None:
    value = parts.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise ValueError(f"`{name}` must be text of at most {limit} characters")
    return value.strip() or None


def _check_consent(store: ObjectStore, *, consent_id: str | None, recording: bytes | None,
                   speaker: str | None, statement: str | None, language: str | None,
                   tenant: str) -> tuple[consents.ConsentRecord, bytes]:
    """The consent a voice registration names (an ID) or carries (a recording)."""
    if consent_id:
        return consents.load_consent(store, consent_id, tenant=tenant)
    if recording is None:
        raise ConsentError("consent_required",
                           "a voice needs the speaker's consent: a `consent` ID from POST "
                           "/v1/audio/voice_consents, or a `consent_recording` file part")
    record = consents.create_consent(store, speaker=speaker or "", recording=recording,
                                     language=language, statement=statement, tenant=tenant)
    return record, recording


def consented_voice(store: ObjectStore, *, voice_id: str, sample: Audio, threshold: float,
                    tenant: str, consent_id: str | None = None,
                    recording: bytes | None = None, speaker: str | None = None,
                    statement: str | None = None,
                    language: str | None = None) -> ConsentRef:
    """Match the consent with the sample and keep it with the voice, or raise ConsentError
    (nothing of the voice stored; a consent sent inline is not kept; one named by its ID
    stays pending). An inline consent without a speaker's name is the voice ID's."""
    record, data = _check_consent(store, consent_id=consent_id, recording=recording,
                                  speaker=speaker or voice_id, statement=statement,
                                  language=language, tenant=tenant)
    result = consents.match(consents.check_recording(data), sample, ENCODER, threshold)
    try:
        return consents.keep_with_voice(store, record, data, voice_id=voice_id,
                                        result=result, tenant=tenant)
    except ConsentError:
        if not consent_id:
            consents.delete_consent(store, record.id, tenant=tenant)
        raise


async def create_consent(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    refused = _multipart(request, "/v1/audio/voice_consents", "recording")
    if refused is not None:
        return refused
    async with request.form(max_files=1, max_fields=MAX_TEXT_PARTS,
                            max_part_size=gw.settings.gateway.max_upload_bytes) as form:
        upload = form.get("recording")
        if not isinstance(upload, UploadFile):
            return json_error(400, "the `recording` file part is missing", "invalid_request",
                              param="recording")
        data = await upload.read()
        parts = {k: v for k, v in form.multi_items() if k != "recording"}
    unknown = sorted(set(parts) - {"name", "language", "statement"})
    if unknown:
        return json_error(400, f"unknown part(s) {', '.join(unknown)}: name, recording, "
                               "language, statement", "invalid_request", param=unknown[0])
    try:
        name = _text(parts, "name", consents.MAX_NAME_CHARS)
        language = _text(parts, "language", 35)
        statement = _text(parts, "statement", consents.MAX_STATEMENT_CHARS)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request")
    if not name:
        return json_error(400, "`name` (the speaker's name) is required", "invalid_request",
                          param="name")
    try:
        record = await asyncio.to_thread(
            consents.create_consent, gw.store, speaker=name, recording=data,
            language=language, statement=statement, tenant=tenant_of_request(request))
    except ConsentError as exc:
        return consent_error(exc)
    try:
        await gw.audit.record(request, "consent.create", record.id)
    except AuditUnavailable:
        # unaudited, it must not exist: the caller gets a 503 and no ID to use
        await asyncio.to_thread(consents.delete_consent, gw.store, record.id,
                                tenant=tenant_of_request(request))
        raise
    return _answer(_consent_answer(record), 201)


async def consent(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    consent_id, tenant = request.path_params["id"], tenant_of_request(request)
    try:
        if request.method == "DELETE":
            await gw.audit.record(request, "consent.delete", consent_id)
            removed = await asyncio.to_thread(consents.delete_consent, gw.store, consent_id,
                                              tenant=tenant)
            if not removed:
                raise ConsentError("consent_not_found", f"consent {consent_id!r} is unknown")
            return _answer(ConsentDeleted(id=consent_id, object="audio.voice_consent",
                                          deleted=True))
        record, _ = await asyncio.to_thread(consents.load_consent, gw.store, consent_id,
                                            tenant=tenant)
    except ValueError as exc:  # a path-like ID (ConsentError is a VoiceFactoryError)
        return json_error(404, str(exc), "consent_not_found")
    except ConsentError as exc:
        return consent_error(exc)
    return _answer(_consent_answer(record))


async def create_custom_voice(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    refused = _multipart(request, "/v1/audio/voices", "audio_sample")
    if refused is not None:
        return refused
    async with request.form(max_files=1, max_fields=MAX_TEXT_PARTS,
                            max_part_size=gw.settings.gateway.max_upload_bytes) as form:
        upload = form.get("audio_sample")
        if not isinstance(upload, UploadFile):
            return json_error(400, "the `audio_sample` file part is missing",
                              "invalid_request", param="audio_sample")
        sample = await upload.read()
        parts = {k: v for k, v in form.multi_items() if k != "audio_sample"}
    try:
        # OpenAI's voice `name` is our voice ID: what /v1/audio/speech's `voice` names.
        voice_id = check_id("name", _text(parts, "name", VOICE_ID_MAX) or "", VOICE_ID_MAX)
        consent_id = _text(parts, "consent", VOICE_ID_MAX)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param="name")
    if not consent_id:
        return json_error(400, "`consent` (an ID from POST /v1/audio/voice_consents) is "
                               "required", "consent_required", param="consent")
    report = await asyncio.to_thread(check_reference, sample)
    if not report.ok or report.audio is None:
        return json_error(422, "; ".join(report.problems), "reference_invalid",
                          param="audio_sample")
    tenant = tenant_of_request(request)
    try:
        ref = await asyncio.to_thread(
            consented_voice, gw.store, voice_id=voice_id, sample=report.audio,
            threshold=gw.settings.gateway.consent_threshold, tenant=tenant,
            consent_id=consent_id)
    except ConsentError as exc:
        return consent_error(exc)
    event = await publish(gw, request, voice_id=voice_id, reference=sample, consent=ref,
                          tenant=tenant)
    if isinstance(event, Response):
        return event
    return _answer(CustomVoice(id=voice_id, object="audio.voice", name=voice_id,
                               created_at=_unix(event.created_at), consent=ref.id,
                               similarity=ref.similarity), 201)


async def publish(gw: Gateway, request: Request, *, voice_id: str, reference: bytes,
                  consent: ConsentRef, tenant: str, prompt_text: str | None = None,
                  language: str | None = None) -> VoiceRegistration | Response:
    """The audit event (not written: 503, nothing registered), register_voice and the event
    on tts.voices; a 422 for a reference the registry refuses."""
    await gw.audit.record(request, "voice.create", voice_id)
    try:
        event = await asyncio.to_thread(
            register_voice, gw.store, voice_id=voice_id, reference=reference,
            prompt_text=prompt_text, language=language, tenant=tenant, consent=consent)
    except VoiceFactoryError as exc:
        if exc.code == ErrorCode.STORAGE_ERROR:
            raise  # the app's 503: the caller may retry
        return json_error(422, str(exc), str(exc.code), param="reference")
    assert gw.producer is not None
    await gw.producer.send_and_wait(gw.names.voices, encode(event),
                                    key=voice_topic_key(voice_id, tenant))
    return event


def routes() -> list[Route]:
    return [Route("/v1/audio/voice_consents", create_consent, methods=["POST"]),
            Route("/v1/audio/voice_consents/{id}", consent, methods=["GET", "DELETE"]),
            Route("/v1/audio/voices", create_custom_voice, methods=["POST"])]
