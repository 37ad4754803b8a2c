"""ObjectStore on the real S3 server (the Versity gateway of the local stack): what the
idempotency check relies on, user metadata that round-trips and a put that only writes a
key nobody has written."""

from __future__ import annotations

import uuid

import pytest

from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.fingerprint import Fingerprint
from topics.events import SynthesisRequest

pytestmark = pytest.mark.integration


def test_user_metadata_round_trips_and_put_new_never_overwrites(settings: Settings) -> None:
    store = make_store(settings.store)
    key = f"audio/2031/01/01/st-{uuid.uuid4().hex[:8]}.wav"
    fingerprint = Fingerprint.of(SynthesisRequest(request_id="st", voice_id="v",
                                                  text="长的文本。" * 400, speed=1.25))
    meta = {"sha256": "ab" * 32, "voice-sha256": "cd" * 32, **fingerprint.metadata()}
    assert store.put_new(key, b"first", "audio/wav", metadata=meta) is True
    info = store.stat(key)
    assert info is not None and info.size == len(b"first")
    assert info.metadata == meta  # names come back lower-case: ours are already
    assert fingerprint.differs_from(info.metadata) is None

    other = Fingerprint.of(SynthesisRequest(request_id="st", voice_id="v", text="Other."))
    assert store.put_new(key, b"second", "audio/wav", metadata=other.metadata()) is False
    assert store.get(key) == b"first"  # refused with 412: the first object stands
    again = store.stat(key)
    assert again is not None and again.metadata == meta
    assert other.differs_from(again.metadata) == ["text", "speed"]

    store.put(key, b"third", "audio/wav")  # the plain put still overwrites (voices, jobs)
    assert store.get(key) == b"third"
    store.delete(key)
