"""The voice registry in the object store, and the profile lookup the worker uses.

register: validate reference -> put `voices/{id}/reference.{ext}` -> put `voice.json`
(a `tts.voice.v1` event) -> the caller produces the same event to `tts.voices`.
resolve: voice.json -> reference bytes -> engine profile, memoised per (voice, sha256).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from pipeline import keys
from pipeline.audio import decode
from pipeline.engines.base import Profile, Synthesizer
from pipeline.reference import check_reference
from pipeline.storage import ObjectStore
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import VoiceRegistration, encode

_EXT = {b"RIFF": "wav", b"fLaC": "flac", b"OggS": "ogg", b"ID3": "mp3"}


def sniff_extension(data: bytes, fallback: str = "wav") -> str:
    for magic, ext in _EXT.items():
        if data.startswith(magic):
            return ext
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "mp3"
    return fallback


def register_voice(store: ObjectStore, *, voice_id: str, reference: bytes,
                   prompt_text: str | None, language: str | None) -> VoiceRegistration:
    keys.voice_prefix(voice_id)  # raises on a path-like ID before anything is written
    report = check_reference(reference)
    if not report.ok:
        raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID, "; ".join(report.problems))
    ext = sniff_extension(reference)
    ref_key = keys.voice_reference_key(voice_id, ext)
    store.put(ref_key, reference, content_type=f"audio/{ext}")
    event = VoiceRegistration(
        voice_id=voice_id,
        reference=f"s3://{store.bucket}/{ref_key}",
        sha256=hashlib.sha256(reference).hexdigest(),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        prompt_text=prompt_text,
        language=language,
    )
    store.put(keys.voice_json_key(voice_id), encode(event), content_type="application/json")
    return event


class ProfileResolver:
    """Voice ID -> engine profile. A small in-process memo; the LRU tiers come later."""

    def __init__(self, *, store: ObjectStore, engine: Synthesizer,
                 on_lookup: Callable[[str], None] | None = None) -> None:
        self._store = store
        self._engine = engine
        self._on_lookup = on_lookup or (lambda result: None)  # "hit" | "store" | "miss"
        self._profiles: dict[tuple[str, str], Profile] = {}
        self._lock = threading.Lock()

    def resolve(self, voice_id: str) -> Profile:
        raw = self._store.get(keys.voice_json_key(voice_id))
        if raw is None:
            raise InvalidRequest(ErrorCode.VOICE_NOT_FOUND,
                                 f"voice {voice_id!r} is not registered "
                                 f"(no {keys.voice_json_key(voice_id)})", voice_id=voice_id)
        voice = msgspec.json.decode(raw, type=VoiceRegistration)
        with self._lock:
            cached = self._profiles.get((voice_id, voice.sha256))
        if cached is not None:
            self._on_lookup("hit")
            return cached
        ref_key = voice.reference.split("/", 3)[-1]
        data = self._store.get(ref_key)
        if data is None:
            raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID,
                                    f"voice {voice_id!r}: reference {voice.reference} is missing")
        profile = self._engine.profile(voice_id=voice_id, sha256=voice.sha256,
                                       reference=decode(data), prompt_text=voice.prompt_text)
        with self._lock:
            self._profiles[(voice_id, voice.sha256)] = profile
        self._on_lookup("miss")
        return profile
