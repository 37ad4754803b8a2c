"""The tiered profile resolver: RAM hit, store load, compute; over an in-memory object map.

The storage calls themselves are exercised against the real S3 server in the integration
suite; here the store is a dict so the tier logic can be checked exactly.
"""

from __future__ import annotations

import hashlib
import threading
import time

import numpy as np
import pytest

from pipeline import keys
from pipeline.audio import Audio, encode_wav
from pipeline.engines.base import Capabilities, Profile, SynthesisItem, Synthesized, VoiceMeasures
from pipeline.profiles import ProfileCache
from pipeline.speaker import SpeakerEncoder
from pipeline.storage import ObjectInfo
from pipeline.voices import ProfileResolver, list_voices, register_voice, remove_voice
from tests.unit.pipeline.conftest import SENTENCE, espeak_wav
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError


class MemoryStore:
    bucket = "voicefactory"

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, dict[str, str]]] = {}
        self.gets: list[str] = []

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        self.objects[key] = (data, metadata or {})

    def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        item = self.objects.get(key)
        return item[0] if item else None

    def stat(self, key: str) -> ObjectInfo | None:
        item = self.objects.get(key)
        return ObjectInfo(key, len(item[0]), item[1]) if item else None

    def list_prefix(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


class SlowProfilingEngine:
    name = "probe"
    capabilities = Capabilities(("en",), ("zero_shot",), False, False, "none")

    def __init__(self) -> None:
        self.profiled: list[str] = []

    def load(self) -> None:
        pass

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        time.sleep(0.05)  # long enough for concurrent resolves to overlap
        self.profiled.append(voice_id)
        return Profile(voice_id, sha256, self.name, {"probe": 1.0},
                       {"prompt_feat": np.ones((4, 80), np.float32)})

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        raise NotImplementedError


def setup(encoder: SpeakerEncoder) -> tuple[MemoryStore, SlowProfilingEngine, list[str],
                                             ProfileResolver]:
    store, engine = MemoryStore(), SlowProfilingEngine()
    lookups: list[str] = []
    register_voice(store, voice_id="alice", reference=espeak_wav(pitch=30),  # type: ignore[arg-type]
                   prompt_text=SENTENCE, language="en")
    resolver = ProfileResolver(store=store, engine=engine, encoder=encoder,  # type: ignore[arg-type]
                               on_lookup=lookups.append)
    return store, engine, lookups, resolver


def test_computed_once_then_ram_hits(encoder: SpeakerEncoder) -> None:
    store, engine, lookups, resolver = setup(encoder)
    profiles = [resolver.resolve("alice") for _ in range(100)]
    assert engine.profiled == ["alice"]
    assert lookups.count("miss") == 1 and lookups.count("hit") == 99
    first = profiles[0]
    assert first.tensors["speaker_embedding"].shape == (256,)
    assert first.features["median_f0_hz"] > 50
    assert first.features["speaking_rate"] > 1
    assert first.text["prompt_text"] == SENTENCE
    assert keys.profile_key("alice", first.sha256, "probe") in store.objects


def test_a_restarted_worker_loads_from_the_store(encoder: SpeakerEncoder) -> None:
    store, engine, _, resolver = setup(encoder)
    computed = resolver.resolve("alice")
    lookups: list[str] = []
    fresh = ProfileResolver(store=store, engine=engine, encoder=encoder,  # type: ignore[arg-type]
                            on_lookup=lookups.append)
    loaded = fresh.resolve("alice")
    assert lookups == ["store"] and engine.profiled == ["alice"]
    np.testing.assert_array_equal(loaded.tensors["speaker_embedding"],
                                  computed.tensors["speaker_embedding"])
    assert loaded.features == computed.features


def test_concurrent_resolves_of_one_voice_compute_once(encoder: SpeakerEncoder) -> None:
    _, engine, lookups, resolver = setup(encoder)
    threads = [threading.Thread(target=resolver.resolve, args=("alice",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.profiled == ["alice"]
    assert lookups.count("miss") == 1 and lookups.count("hit") == 7


def test_an_evicted_profile_comes_back_from_the_store(encoder: SpeakerEncoder) -> None:
    store, engine, lookups, _ = setup(encoder)
    register_voice(store, voice_id="bob", reference=espeak_wav(pitch=70),  # type: ignore[arg-type]
                   prompt_text=None, language="en")
    resolver = ProfileResolver(store=store, engine=engine, encoder=encoder,  # type: ignore[arg-type]
                               cache=ProfileCache(max_entries=1), on_lookup=lookups.append)
    for voice in ("alice", "bob", "alice"):
        resolver.resolve(voice)
    assert lookups == ["miss", "miss", "store"]


def test_unknown_and_removed_voices_are_voice_not_found(encoder: SpeakerEncoder) -> None:
    store, _, _, resolver = setup(encoder)
    with pytest.raises(InvalidRequest) as unknown:
        resolver.resolve("nobody")
    assert unknown.value.code is ErrorCode.VOICE_NOT_FOUND
    assert "not registered" in unknown.value.message
    assert [v.voice_id for v in list_voices(store)] == ["alice"]  # type: ignore[arg-type]
    resolver.resolve("alice")
    assert remove_voice(store, "alice") >= 3  # type: ignore[arg-type]
    assert store.list_prefix("voices/alice/") == []
    resolver.forget("alice")
    with pytest.raises(InvalidRequest, match="not registered"):
        resolver.resolve("alice")


def test_registration_refuses_a_bad_reference_before_writing(encoder: SpeakerEncoder) -> None:
    store = MemoryStore()
    one_second = encode_wav(Audio(0.3 * np.sin(np.arange(16000, dtype=np.float32) * 0.07)
                                  .astype(np.float32), 16000))
    with pytest.raises(VoiceFactoryError, match=r"reference too short: 1\.0 s"):
        register_voice(store, voice_id="short", reference=one_second,  # type: ignore[arg-type]
                       prompt_text=None, language=None)
    with pytest.raises(ValueError, match=r"contains '\.\.'"):
        register_voice(store, voice_id="a..b", reference=one_second,  # type: ignore[arg-type]
                       prompt_text=None, language=None)
    assert store.objects == {}


def test_ad_hoc_references_are_keyed_by_the_audio_hash(encoder: SpeakerEncoder) -> None:
    store, engine = MemoryStore(), SlowProfilingEngine()
    lookups: list[str] = []
    clip = espeak_wav(pitch=40)
    store.put("uploads/a.wav", clip, "audio/wav")
    store.put("uploads/b.wav", clip, "audio/wav", {"sha256": hashlib.sha256(clip).hexdigest()})
    resolver = ProfileResolver(store=store, engine=engine, encoder=encoder,  # type: ignore[arg-type]
                               on_lookup=lookups.append)
    a = resolver.resolve("adhoc-1", "s3://voicefactory/uploads/a.wav")
    b = resolver.resolve("adhoc-1", "s3://voicefactory/uploads/b.wav")
    assert a.sha256 == b.sha256 == hashlib.sha256(clip).hexdigest()
    assert lookups == ["miss", "hit"]
    with pytest.raises(InvalidRequest, match="path-like"):
        resolver.resolve("adhoc-2", "s3://voicefactory/uploads/../voices/x/voice.json")
    with pytest.raises(InvalidRequest, match="not this deployment's bucket"):
        resolver.resolve("adhoc-3", "s3://elsewhere/a.wav")
    with pytest.raises(InvalidRequest, match="does not exist"):
        resolver.resolve("adhoc-4", "s3://voicefactory/uploads/missing.wav")


def test_a_corrupted_stored_reference_is_rejected_in_the_worker(encoder: SpeakerEncoder) -> None:
    store, _, _, resolver = setup(encoder)
    [ref_key] = [k for k in store.objects if "/reference." in k]
    store.objects[ref_key] = (b"\x00" * 1000, {})
    with pytest.raises(InvalidRequest) as bad:
        resolver.resolve("alice")
    assert bad.value.code is ErrorCode.REFERENCE_INVALID
    assert "undecodable" in bad.value.message


def test_voice_json_is_trusted_for_its_ttl_only(encoder: SpeakerEncoder) -> None:
    store, engine, _, _ = setup(encoder)
    now = [0.0]
    resolver = ProfileResolver(store=store, engine=engine, encoder=encoder,  # type: ignore[arg-type]
                               voice_ttl_seconds=10, clock=lambda: now[0])
    resolver.resolve("alice")
    json_key = keys.voice_json_key("alice")
    reads = store.gets.count(json_key)
    now[0] = 5.0
    resolver.resolve("alice")
    assert store.gets.count(json_key) == reads
    now[0] = 11.0
    resolver.resolve("alice")
    assert store.gets.count(json_key) == reads + 1


def test_a_tenant_sees_and_uses_only_its_own_voices(encoder: SpeakerEncoder) -> None:
    """Two tenants register one voice ID: separate objects, lists, profiles and removal;
    another tenant's voice is `voice_not_found` with the words of an unknown one."""
    store, _engine, _lookups, resolver = setup(encoder)  # `alice` of the default tenant
    acme = register_voice(store, voice_id="alice", reference=espeak_wav(pitch=70),  # type: ignore[arg-type]
                          prompt_text=None, language="en", tenant="acme")
    assert acme.tenant == "acme"
    assert acme.reference.endswith("/tenants/acme/voices/alice/reference.wav")
    assert [v.voice_id for v in list_voices(store, tenant="acme")] == ["alice"]  # type: ignore[arg-type]
    assert list_voices(store, tenant="rival") == []  # type: ignore[arg-type]
    assert [v.tenant for v in list_voices(store)] == [None]  # type: ignore[arg-type]
    default_profile = resolver.resolve("alice")
    acme_profile = resolver.resolve("alice", tenant="acme")
    assert acme_profile.sha256 == acme.sha256 != default_profile.sha256
    assert store.list_prefix("tenants/acme/voices/alice/profile-")  # persisted in its tenant
    with pytest.raises(InvalidRequest) as other:
        resolver.resolve("alice", tenant="rival")
    with pytest.raises(InvalidRequest) as unknown:
        resolver.resolve("nobody", tenant="rival")
    assert other.value.code is unknown.value.code is ErrorCode.VOICE_NOT_FOUND
    assert other.value.message == unknown.value.message.replace("nobody", "alice")
    with pytest.raises(InvalidRequest) as gone:
        remove_voice(store, "alice", tenant="rival")  # type: ignore[arg-type]
    assert gone.value.code is ErrorCode.VOICE_NOT_FOUND
    assert remove_voice(store, "alice", tenant="acme") >= 3  # type: ignore[arg-type]
    assert store.list_prefix("tenants/") == []
    assert store.stat(keys.voice_json_key("alice")) is not None  # the default's stays
    resolver.forget("alice", tenant="acme")
    with pytest.raises(InvalidRequest, match="not registered"):
        resolver.resolve("alice", tenant="acme")
    assert resolver.resolve("alice") is default_profile


def test_an_ad_hoc_reference_must_be_the_tenants_own(encoder: SpeakerEncoder) -> None:
    store, engine = MemoryStore(), SlowProfilingEngine()
    clip = espeak_wav(pitch=40)
    store.put("tenants/acme/uploads/a.wav", clip, "audio/wav")
    store.put("uploads/b.wav", clip, "audio/wav")
    resolver = ProfileResolver(store=store, engine=engine, encoder=encoder)  # type: ignore[arg-type]
    assert resolver.resolve("x", "s3://voicefactory/tenants/acme/uploads/a.wav", tenant="acme")
    for tenant, url in ((None, "tenants/acme/uploads/a.wav"), ("rival", "uploads/b.wav"),
                        ("rival", "tenants/acme/uploads/a.wav")):
        with pytest.raises(InvalidRequest, match="does not exist"):
            resolver.resolve("x", f"s3://voicefactory/{url}", tenant=tenant)
