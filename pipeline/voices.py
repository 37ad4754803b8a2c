"""The voice registry in the object store, and the tiered profile lookup the worker uses.

Every operation takes the owning `tenant` (topics/tenancy.py): a tenant's voices live under
its own root (`voices/...` for `default`, `tenants/{tenant}/voices/...` for the others), so
one tenant's ID never reaches another's objects; the compacted topic's key is
`scoped_id(tenant, voice_id)`.
register: validate the reference -> put `voices/{id}/reference.{ext}` -> put `voice.json` (a
`tts.voice.v1` event) -> the caller produces the same event to the compacted `tts.voices`.
remove: delete every object under `voices/{id}/` -> the caller produces a tombstone.
resolve(voice_id | ad-hoc reference, tenant):
  the tenant's voice.json (trusted for `voice_ttl_seconds`) -> (voice, sha256, engine)
  -> RAM LRU ("hit") -> stored safetensors ("store") -> reference bytes, validated again,
     measured (pipeline.speaker) and profiled by the engine ("miss"), then persisted.
Concurrent resolves of one voice wait for a single computation (one key lock each).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from pipeline import keys
from pipeline.engines.base import Profile, Synthesizer
from pipeline.profiles import ProfileCache, ProfileFormatError, ProfileKey, from_safetensors
from pipeline.profiles import to_safetensors as profile_bytes
from pipeline.reference import check_reference
from pipeline.speaker import SpeakerEncoder, measure
from pipeline.storage import ObjectStore
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import ConsentRef, VoiceRegistration, encode
from topics.tenancy import DEFAULT_TENANT, record_tenant, scoped_id, tenant_of, tenant_root
from topics.validation import ADHOC_PREFIX

__all__ = ["ADHOC_PREFIX", "ProfileResolver", "list_voices", "register_voice", "remove_voice",
           "voice_topic_key"]

log = logging.getLogger(__name__)

_EXT = {b"RIFF": "wav", b"fLaC": "flac", b"OggS": "ogg", b"ID3": "mp3"}


def sniff_extension(data: bytes, fallback: str = "wav") -> str:
    for magic, ext in _EXT.items():
        if data.startswith(magic):
            return ext
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "mp3"
    if data[4:8] == b"ftyp":
        return "m4a"
    return fallback


def voice_topic_key(voice_id: str, tenant: str | None = None) -> bytes:
    """The key of a voice's records on the compacted tts.voices: unique across tenants."""
    return scoped_id(tenant, voice_id).encode()


def register_voice(store: ObjectStore, *, voice_id: str, reference: bytes,
                   prompt_text: str | None, language: str | None,
                   tenant: str | None = None,
                   consent: ConsentRef | None = None) -> VoiceRegistration:
    """`consent`: the speaker's consent, already matched and kept under the voice
    (pipeline.consent.keep_with_voice); the gateway and the CLI never register without it."""
    # raises on a path-like ID or tenant before anything is written
    keys.voice_prefix(voice_id, tenant=tenant)
    report = check_reference(reference)
    if not report.ok:
        raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID, "; ".join(report.problems))
    ext = sniff_extension(reference)
    ref_key = keys.voice_reference_key(voice_id, ext, tenant=tenant)
    for stale in store.list_prefix(keys.voice_prefix(voice_id, tenant=tenant)):
        if stale != ref_key and stale.rsplit("/", 1)[-1].startswith("reference."):
            store.delete(stale)  # a re-registration in another format: one reference only
    store.put(ref_key, reference, content_type=f"audio/{ext}")
    event = VoiceRegistration(
        voice_id=voice_id,
        reference=f"s3://{store.bucket}/{ref_key}",
        sha256=hashlib.sha256(reference).hexdigest(),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        prompt_text=prompt_text,
        language=language,
        tenant=record_tenant(tenant),
        consent=consent,
    )
    store.put(keys.voice_json_key(voice_id, tenant=tenant), encode(event),
              content_type="application/json")
    return event


def remove_voice(store: ObjectStore, voice_id: str, *, tenant: str | None = None) -> int:
    """Delete the voice's reference, voice.json and stored profiles; returns objects removed.
    Another tenant's voice of the same ID is not this tenant's: `voice_not_found`."""
    prefix = keys.voice_prefix(voice_id, tenant=tenant)
    found = store.list_prefix(prefix)
    if keys.voice_json_key(voice_id, tenant=tenant) not in found:
        raise InvalidRequest(ErrorCode.VOICE_NOT_FOUND, f"voice {voice_id!r} is not registered",
                             voice_id=voice_id)
    # voice.json last: a reader that still sees it also still finds the reference.
    for key in sorted(found, key=lambda k: k.endswith("/voice.json")):
        store.delete(key)
    return len(found)


def read_voice(store: ObjectStore, voice_id: str, *,
               tenant: str | None = None) -> VoiceRegistration | None:
    """The tenant's registration of `voice_id`, or None (unknown, or another tenant's)."""
    raw = store.get(keys.voice_json_key(voice_id, tenant=tenant))
    return msgspec.json.decode(raw, type=VoiceRegistration) if raw is not None else None


def list_voices(store: ObjectStore, *, tenant: str | None = None) -> list[VoiceRegistration]:
    """The tenant's voices only: `default` lists `voices/`, which `tenants/...` is not under."""
    voices = []
    for key in store.list_prefix(keys.voices_root(tenant=tenant)):
        if key.endswith("/voice.json"):
            raw = store.get(key)
            if raw is not None:
                voices.append(msgspec.json.decode(raw, type=VoiceRegistration))
    return sorted(voices, key=lambda v: v.voice_id)


def parse_s3_url(url: str, default_bucket: str) -> tuple[str, str]:
    """`s3://bucket/key` -> (bucket, key), with the key checked like any other ID path."""
    if not url.startswith("s3://"):
        raise InvalidRequest(ErrorCode.INVALID_REQUEST,
                             f"reference must be an s3://bucket/key URL, got {url[:80]!r}")
    bucket, _, key = url[5:].partition("/")
    if not bucket or not key:
        raise InvalidRequest(ErrorCode.INVALID_REQUEST,
                             f"reference {url[:80]!r} needs both a bucket and a key")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 for c in key):
        raise InvalidRequest(ErrorCode.INVALID_REQUEST,
                             f"reference key {key[:80]!r} is path-like (empty, '.' or '..' parts)")
    return bucket, key


def owns_key(tenant: str | None, key: str) -> bool:
    """Whether an object key is under the tenant's root: `tenants/{tenant}/...` for a named
    tenant, anything outside `tenants/` for `default`."""
    if tenant_of(tenant) == DEFAULT_TENANT:
        return not key.startswith("tenants/")
    return key.startswith(tenant_root(tenant))


@dataclasses.dataclass(frozen=True)
class _Voice:
    voice_id: str
    tenant: str | None
    sha256: str
    reference_key: str
    prompt_text: str | None
    read_at: float


class ProfileResolver:
    """Voice ID (or an ad-hoc reference URL) of a tenant -> engine profile, through the three
    tiers. A voice is looked up only under the request's tenant, so a request naming another
    tenant's voice is `voice_not_found`, like an unknown one; the caches are keyed by
    `scoped_id(tenant, voice_id)` so two tenants' voices of one ID never share a profile."""

    def __init__(self, *, store: ObjectStore, engine: Synthesizer,
                 cache: ProfileCache | None = None, encoder: SpeakerEncoder | None = None,
                 voice_ttl_seconds: float = 10.0,
                 on_lookup: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._engine = engine
        # `is None`, not `or`: an empty cache has len 0 and is falsy.
        self.cache = cache if cache is not None else ProfileCache()
        self.encoder = encoder if encoder is not None else SpeakerEncoder()
        self._ttl = voice_ttl_seconds
        self._on_lookup = on_lookup or (lambda result: None)  # "hit" | "store" | "miss"
        self._clock = clock
        self._voices: dict[str, _Voice] = {}
        self._locks: dict[ProfileKey, threading.Lock] = {}
        self._lock = threading.Lock()
        self.computed = 0  # profiles built from a reference, for tests and benchmarks

    def resolve(self, voice_id: str, reference: str | None = None, *,
                tenant: str | None = None) -> Profile:
        voice = (self._adhoc(voice_id, reference, tenant) if reference
                 else self._registered(voice_id, tenant))
        key = (scoped_id(tenant, voice.voice_id), voice.sha256, self._engine.name)
        cached = self.cache.get(key)
        if cached is not None:
            self._on_lookup("hit")
            return cached
        with self._key_lock(key):
            cached = self.cache.get(key)  # computed by the thread we waited for
            if cached is not None:
                self._on_lookup("hit")
                return cached
            profile = self._load_stored(key, voice)
            if profile is not None:
                self._on_lookup("store")
            else:
                profile = self._compute(voice)
                self._on_lookup("miss")
            self.cache.put(key, profile)
            return profile

    def forget(self, voice_id: str, *, tenant: str | None = None) -> None:
        """A voice was removed or re-registered: drop what this process knows of it."""
        scoped = scoped_id(tenant, voice_id)
        with self._lock:
            self._voices.pop(scoped, None)
        self.cache.discard_voice(scoped)

    def _key_lock(self, key: ProfileKey) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def _registered(self, voice_id: str, tenant: str | None) -> _Voice:
        scoped = scoped_id(tenant, voice_id)
        with self._lock:
            known = self._voices.get(scoped)
        if known is not None and self._clock() - known.read_at < self._ttl:
            return known
        json_key = keys.voice_json_key(voice_id, tenant=tenant)
        raw = self._store.get(json_key)
        if raw is None:
            self.forget(voice_id, tenant=tenant)
            # The same words for unknown and another tenant's: the message names no tenant.
            raise InvalidRequest(ErrorCode.VOICE_NOT_FOUND,
                                 f"voice {voice_id!r} is not registered", voice_id=voice_id)
        event = msgspec.json.decode(raw, type=VoiceRegistration)
        _, ref_key = parse_s3_url(event.reference, self._store.bucket)
        if not owns_key(tenant, ref_key):  # a voice.json pointing outside its tenant
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID,
                                 f"voice {voice_id!r}: its reference is not in its tenant's "
                                 "objects", voice_id=voice_id)
        voice = _Voice(voice_id, tenant, event.sha256, ref_key, event.prompt_text,
                       self._clock())
        with self._lock:
            self._voices[scoped] = voice
        return voice

    def _adhoc(self, voice_id: str, reference: str, tenant: str | None) -> _Voice:
        bucket, ref_key = parse_s3_url(reference, self._store.bucket)
        if bucket != self._store.bucket:
            raise InvalidRequest(ErrorCode.INVALID_REQUEST,
                                 f"reference bucket {bucket!r} is not this deployment's bucket "
                                 f"{self._store.bucket!r}", voice_id=voice_id)
        if not owns_key(tenant, ref_key):
            # Cloning from another tenant's reference clip is using its voice: answered as a
            # missing object, so the answer says nothing about what the other tenant stores.
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID,
                                 f"reference {reference} does not exist", voice_id=voice_id)
        info = self._store.stat(ref_key)
        if info is None:
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID,
                                 f"reference {reference} does not exist", voice_id=voice_id)
        # Keyed by the audio's sha256: the same clip under two URLs is profiled once.
        sha = info.metadata.get("sha256") or self._sha_of(ref_key, reference)
        return _Voice(voice_id, tenant, sha, ref_key, None, self._clock())

    def _sha_of(self, ref_key: str, reference: str) -> str:
        data = self._store.get(ref_key)
        if data is None:
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID, f"reference {reference} vanished")
        return hashlib.sha256(data).hexdigest()

    def _load_stored(self, key: ProfileKey, voice: _Voice) -> Profile | None:
        _, sha, engine = key
        voice_id = voice.voice_id
        raw = self._store.get(keys.profile_key(voice_id, sha, engine, tenant=voice.tenant))
        if raw is None:
            return None
        try:
            profile = from_safetensors(raw)
        except ProfileFormatError as exc:
            log.warning("stored profile of voice %s unusable, recomputing: %s", voice_id, exc)
            return None
        return profile if profile.sha256 == sha and profile.engine == engine else None

    def _compute(self, voice: _Voice) -> Profile:
        data = self._store.get(voice.reference_key)
        if data is None:
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID,
                                 f"voice {voice.voice_id!r}: reference {voice.reference_key} "
                                 "is missing", voice_id=voice.voice_id)
        report = check_reference(data)  # again in the worker: the store may hold anything
        if not report.ok or report.audio is None:
            raise InvalidRequest(ErrorCode.REFERENCE_INVALID,
                                 f"voice {voice.voice_id!r}: " + "; ".join(report.problems),
                                 voice_id=voice.voice_id)
        measures = measure(report.audio, voice.prompt_text, self.encoder)
        engine_profile = self._engine.profile(
            voice_id=voice.voice_id, sha256=voice.sha256, reference=report.audio,
            prompt_text=voice.prompt_text, measures=measures)
        features = dict(engine_profile.features)
        for name in ("median_f0_hz", "f0_range_semitones", "speaking_rate"):
            value = getattr(measures, name)
            if value is not None:
                features.setdefault(name, float(value))
        profile = dataclasses.replace(
            engine_profile, features=features,
            tensors={**engine_profile.tensors, "speaker_embedding": measures.embedding},
            text={**engine_profile.text, **({"prompt_text": voice.prompt_text}
                                            if voice.prompt_text else {})})
        self.computed += 1
        try:
            self._store.put(keys.profile_key(voice.voice_id, voice.sha256, profile.engine,
                                             tenant=voice.tenant),
                            profile_bytes(profile), content_type="application/octet-stream")
        except VoiceFactoryError as exc:  # the profile still serves this process
            log.warning("could not persist profile of voice %s: %s", voice.voice_id, exc)
        return profile
