"""Consent to clone: a recording of the speaker saying a consent statement, checked against
the voice's reference by speaker similarity before the voice may be registered.

create (POST /v1/audio/voice_consents, `voices add --consent`):
  recording bytes -> `check_recording` (pipeline.reference's rules: size, decodable, rate,
  not silent, 3-30 s of speech, not clipped; a failure names the rule, worded for a consent
  recording) -> `consents/{id}/recording.{ext}` + `consents/{id}/consent.json` (a
  `ConsentRecord`: who, when, statement, language) under the tenant's root.
use (POST /v1/audio/voices, POST /v1/voices, `voices add`):
  `load_consent` (the tenant's own only: another tenant's ID reads as unknown)
  -> `match` the recording's GE2E embedding (pipeline.speaker's one shared encoder) with the
     reference's: cosine >= threshold passes, else `ConsentError("consent_mismatch")`
  -> `keep_with_voice`: the recording moves to `voices/{voice_id}/consent.{ext}` beside the
     reference, with the record (similarity and threshold added) in `consent.json`, and the
     pending `consents/{id}/` objects are deleted; the returned `ConsentRef` goes into the
     voice's `tts.voice.v1` event. So one consent registers one voice, and removing the
     voice (everything under its prefix) removes the last copy of the recording.
`register_with_consent` is the three steps and register_voice in one call (CLI, demo).
The threshold (VF_CONSENT_THRESHOLD, default DEFAULT_THRESHOLD) was measured on espeak-ng
speakers by `voicefactory bench consent` (bench/consent.py; docs/voices.md has the table).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from pipeline import keys
from pipeline.audio import Audio
from pipeline.reference import ReferenceReport, check_reference
from pipeline.speaker import SpeakerEncoder, cosine
from pipeline.storage import ObjectStore
from pipeline.voices import register_voice
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import ConsentRef, VoiceRegistration
from topics.tenancy import record_tenant

# GE2E cosine at or above which a consent recording and a reference count as one speaker.
# Chosen from `voicefactory bench consent` (docs/voices.md, "Consent"): the highest threshold
# at which no same-speaker trial failed (lowest 0.923); it lets 2% of other-timbre espeak-ng
# speakers through, which one synthesizer's voices make far closer than people's.
DEFAULT_THRESHOLD = 0.92
MAX_NAME_CHARS = 200
MAX_STATEMENT_CHARS = 1000
STATEMENT = ("I, {speaker}, agree that recordings of my voice may be used to create "
             "a synthetic version of my voice.")
_EXT = {b"RIFF": "wav", b"fLaC": "flac", b"OggS": "ogg", b"ID3": "mp3"}


class ConsentError(VoiceFactoryError):
    """A consent that cannot be used; `reason` is the HTTP error code the gateway answers:
    consent_invalid (the recording breaks a rule), consent_mismatch (another speaker),
    consent_not_found, consent_required."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)
        self.args = (f"{reason}: {self.message}",)
        self.reason = reason


class ConsentRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """consent.json: what was said, by whom, when; after use also the match that let it
    register a voice."""

    id: str
    speaker: str  # the name as given
    statement: str
    language: str | None
    recorded_at: str  # RFC 3339, when the recording was received
    recording: str  # object key of the recording
    sha256: str  # of the recording's bytes
    tenant: str | None = None  # absent: default
    voice_id: str | None = None  # set once a voice was registered with it
    similarity: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class Match:
    similarity: float  # GE2E cosine, -1..1; -1 when either clip held no speech to embed
    threshold: float

    @property
    def ok(self) -> bool:
        return self.similarity >= self.threshold


def new_consent_id() -> str:
    return f"cons-{uuid.uuid4().hex[:16]}"


def statement_for(speaker: str) -> str:
    return STATEMENT.format(speaker=speaker)


def _extension(data: bytes) -> str:
    for magic, ext in _EXT.items():
        if data.startswith(magic):
            return ext
    if data[4:8] == b"ftyp":
        return "m4a"
    return "mp3" if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2") else "bin"


def check_recording(data: bytes) -> Audio:
    """The reference rules, applied to a consent recording; ConsentError names the rule."""
    report: ReferenceReport = check_reference(data)
    if not report.ok or report.audio is None:
        # check_reference words its problems for a reference ("reference too short: ...").
        problems = ["consent recording" + p.removeprefix("reference") if
                    p.startswith("reference") else p for p in report.problems]
        raise ConsentError("consent_invalid", "; ".join(problems))
    return report.audio


def match(consent: Audio, reference: Audio, encoder: SpeakerEncoder,
          threshold: float = DEFAULT_THRESHOLD) -> Match:
    """Speaker similarity of the two clips (one shared encoder, loaded once per process)."""
    similarity = cosine(encoder.embed(consent), encoder.embed(reference))
    return Match(-1.0 if similarity is None else similarity, threshold)


def create_consent(store: ObjectStore, *, speaker: str, recording: bytes,
                   language: str | None, statement: str | None = None,
                   tenant: str | None = None, consent_id: str | None = None) -> ConsentRecord:
    """Check the recording and store it with its record; nothing is stored if it fails."""
    speaker = speaker.strip()
    if not speaker or len(speaker) > MAX_NAME_CHARS:
        raise ConsentError("consent_invalid",
                           f"the speaker's name must be 1-{MAX_NAME_CHARS} characters")
    said = (statement or "").strip() or statement_for(speaker)
    if len(said) > MAX_STATEMENT_CHARS:
        raise ConsentError("consent_invalid",
                           f"the statement has {len(said)} characters, "
                           f"limit {MAX_STATEMENT_CHARS}")
    check_recording(recording)
    cid = consent_id or new_consent_id()
    prefix = keys.consent_prefix(cid, tenant=tenant)
    record = ConsentRecord(
        id=cid, speaker=speaker, statement=said, language=language,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        recording=f"{prefix}recording.{_extension(recording)}",
        sha256=hashlib.sha256(recording).hexdigest(), tenant=record_tenant(tenant))
    store.put(record.recording, recording, content_type="application/octet-stream")
    store.put(prefix + "consent.json", msgspec.json.encode(record),
              content_type="application/json")
    return record


def load_consent(store: ObjectStore, consent_id: str, *,
                 tenant: str | None = None) -> tuple[ConsentRecord, bytes]:
    """The tenant's pending consent and its recording; an ID of another tenant, a used
    consent and an unknown one all answer the same `consent_not_found`."""
    try:
        prefix = keys.consent_prefix(consent_id, tenant=tenant)
    except ValueError as exc:
        raise ConsentError("consent_not_found", str(exc)) from exc
    raw = store.get(prefix + "consent.json")
    record = msgspec.json.decode(raw, type=ConsentRecord) if raw is not None else None
    data = store.get(record.recording) if record is not None else None
    if record is None or data is None:
        raise ConsentError("consent_not_found",
                           f"consent {consent_id!r} is unknown (or already used by a voice)")
    return record, data


def delete_consent(store: ObjectStore, consent_id: str, *, tenant: str | None = None) -> int:
    """Remove a pending consent's objects; returns how many (0: unknown)."""
    found = store.list_prefix(keys.consent_prefix(consent_id, tenant=tenant))
    for key in found:
        store.delete(key)
    return len(found)


def keep_with_voice(store: ObjectStore, record: ConsentRecord, recording: bytes, *,
                    voice_id: str, result: Match, tenant: str | None = None) -> ConsentRef:
    """Move a matched consent under the voice and return the event's reference to it."""
    if not result.ok:
        raise ConsentError(
            "consent_mismatch",
            f"the consent recording's speaker does not match the voice sample: similarity "
            f"{result.similarity:.3f}, need >= {result.threshold:.2f}")
    ext = record.recording.rsplit(".", 1)[-1]
    key = keys.voice_consent_key(voice_id, ext, tenant=tenant)
    used = msgspec.structs.replace(record, recording=key, voice_id=voice_id,
                                   similarity=result.similarity, threshold=result.threshold)
    store.put(key, recording, content_type="application/octet-stream")
    store.put(keys.voice_prefix(voice_id, tenant=tenant) + "consent.json",
              msgspec.json.encode(used), content_type="application/json")
    delete_consent(store, record.id, tenant=tenant)  # one consent, one voice
    return ConsentRef(id=record.id, recording=f"s3://{store.bucket}/{key}",
                      statement=record.statement, speaker=record.speaker,
                      recorded_at=record.recorded_at, similarity=result.similarity)


def register_with_consent(store: ObjectStore, *, voice_id: str, reference: bytes,
                          prompt_text: str | None, language: str | None, recording: bytes,
                          speaker: str, statement: str | None = None,
                          encoder: SpeakerEncoder | None = None,
                          threshold: float = DEFAULT_THRESHOLD,
                          tenant: str | None = None) -> VoiceRegistration:
    """`voices add --consent` and the demo: store the consent, match it with the reference,
    register the voice with it. A failed match leaves nothing behind."""
    report = check_reference(reference)
    if not report.ok or report.audio is None:
        raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID, "; ".join(report.problems))
    record = create_consent(store, speaker=speaker, recording=recording, language=language,
                            statement=statement, tenant=tenant)
    result = match(check_recording(recording), report.audio, encoder or SpeakerEncoder(),
                   threshold)
    try:
        ref = keep_with_voice(store, record, recording, voice_id=voice_id, result=result,
                              tenant=tenant)
    except ConsentError:
        delete_consent(store, record.id, tenant=tenant)
        raise
    return register_voice(store, voice_id=voice_id, reference=reference,
                          prompt_text=prompt_text, language=language, tenant=tenant,
                          consent=ref)
