"""Consent records: the recording's checks, the speaker match on real espeak-ng speech, and
where the objects live before and after a voice uses the consent (over a dict store; the
S3 calls themselves are the integration suite's)."""

from __future__ import annotations

from typing import cast

import msgspec
import pytest

from pipeline import keys
from pipeline.audio import decode
from pipeline.consent import (
    DEFAULT_THRESHOLD,
    ConsentError,
    ConsentRecord,
    Match,
    create_consent,
    keep_with_voice,
    load_consent,
    match,
    statement_for,
)
from pipeline.speaker import SpeakerEncoder
from pipeline.storage import ObjectStore
from pipeline.voices import register_voice, remove_voice
from tests.unit.consumers.gateway.memorystore import MemoryStore
from tests.unit.pipeline.conftest import SENTENCE, espeak_wav

STATEMENT = statement_for("Ada Lovelace")


def as_store(memory: MemoryStore) -> ObjectStore:
    return cast("ObjectStore", memory)  # the calls these functions make, over a dict


def _consent(store: MemoryStore, tenant: str | None = None) -> ConsentRecord:
    return create_consent(as_store(store), speaker="Ada Lovelace", recording=espeak_wav(STATEMENT),
                          language="en-US", tenant=tenant)


def test_a_consent_is_stored_under_the_tenant_with_who_when_and_what() -> None:
    store = MemoryStore()
    record = _consent(store, tenant="acme")
    prefix = keys.consent_prefix(record.id, tenant="acme")
    assert prefix.startswith("tenants/acme/consents/cons-")
    assert sorted(store.objects) == [prefix + "consent.json", prefix + "recording.wav"]
    stored = msgspec.json.decode(store.objects[prefix + "consent.json"], type=ConsentRecord)
    assert stored == record
    assert (record.speaker, record.language, record.tenant) == ("Ada Lovelace", "en-US", "acme")
    assert record.statement == STATEMENT  # the default statement names the speaker
    assert record.recorded_at.endswith("+00:00")


@pytest.mark.parametrize(("data", "problem"), [
    (b"not audio at all", "consent recording undecodable"),
    (None, "consent recording too short: "),
])
def test_a_bad_recording_names_the_rule_and_stores_nothing(data: bytes | None,
                                                          problem: str) -> None:
    store = MemoryStore()
    with pytest.raises(ConsentError) as caught:
        create_consent(as_store(store), speaker="Ada",
                       recording=data or espeak_wav("Yes, I agree."), language="en")
    assert caught.value.reason == "consent_invalid"
    assert caught.value.message.startswith(problem)
    assert store.objects == {}


def test_an_empty_speaker_name_is_refused() -> None:
    with pytest.raises(ConsentError, match="speaker's name"):
        create_consent(as_store(MemoryStore()), speaker="  ", recording=b"x", language="en")


def test_the_same_speaker_passes_and_another_fails(encoder: SpeakerEncoder) -> None:
    consent = decode(espeak_wav(STATEMENT))
    same = match(consent, decode(espeak_wav(SENTENCE)), encoder)
    other = match(consent, decode(espeak_wav(SENTENCE, voice="en-us+f2")), encoder)
    assert same.threshold == DEFAULT_THRESHOLD
    assert same.ok and same.similarity >= DEFAULT_THRESHOLD
    assert not other.ok and other.similarity < DEFAULT_THRESHOLD


def test_a_matched_consent_moves_to_the_voice_and_goes_with_it() -> None:
    store = MemoryStore()
    record = _consent(store, tenant="acme")
    _, data = load_consent(as_store(store), record.id, tenant="acme")
    ref = keep_with_voice(as_store(store), record, data, voice_id="ada", tenant="acme",
                          result=Match(0.95, DEFAULT_THRESHOLD))
    kept = keys.voice_consent_key("ada", "wav", tenant="acme")
    assert ref.recording == f"s3://voicefactory/{kept}"
    assert (ref.id, ref.speaker, ref.statement, ref.similarity) == \
        (record.id, "Ada Lovelace", STATEMENT, 0.95)
    assert store.objects[kept] == data
    used = msgspec.json.decode(store.objects[keys.voice_prefix("ada", tenant="acme")
                                             + "consent.json"], type=ConsentRecord)
    assert (used.voice_id, used.similarity, used.threshold) == ("ada", 0.95, DEFAULT_THRESHOLD)
    # one consent, one voice: the pending record is gone
    assert not store.list_prefix(keys.consent_prefix(record.id, tenant="acme"))
    with pytest.raises(ConsentError) as caught:
        load_consent(as_store(store), record.id, tenant="acme")
    assert caught.value.reason == "consent_not_found"


def test_remove_voice_deletes_the_consent_recording() -> None:
    store = MemoryStore()
    record = _consent(store)
    _, data = load_consent(as_store(store), record.id)
    ref = keep_with_voice(as_store(store), record, data, voice_id="ada",
                          result=Match(0.95, DEFAULT_THRESHOLD))
    register_voice(as_store(store), voice_id="ada", reference=espeak_wav(), prompt_text=SENTENCE,
                   language="en", consent=ref)
    assert keys.voice_consent_key("ada", "wav") in store.objects
    # reference, voice.json, consent.wav, consent.json
    assert remove_voice(as_store(store), "ada") == 4
    assert store.objects == {}


def test_a_mismatch_keeps_the_consent_pending_and_stores_nothing_for_the_voice() -> None:
    store = MemoryStore()
    record = _consent(store)
    before = dict(store.objects)
    with pytest.raises(ConsentError) as caught:
        keep_with_voice(as_store(store), record, b"", voice_id="ada", result=Match(0.81, 0.92))
    assert caught.value.reason == "consent_mismatch"
    assert "similarity 0.810, need >= 0.92" in str(caught.value)
    assert store.objects == before


def test_another_tenants_consent_reads_as_unknown() -> None:
    store = MemoryStore()
    record = _consent(store, tenant="acme")
    for tenant in ("rival", None):
        with pytest.raises(ConsentError) as caught:
            load_consent(as_store(store), record.id, tenant=tenant)
        assert caught.value.reason == "consent_not_found"
    with pytest.raises(ConsentError, match="consent_id"):
        load_consent(as_store(store), "../x", tenant="acme")
