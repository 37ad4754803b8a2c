"""RequestProcessor decisions that need no server: expiry, rejection, stage order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from pipeline.audio import Audio
from pipeline.engines.base import (
    Capabilities,
    Profile,
    SynthesisItem,
    Synthesized,
    VoiceMeasures,
)
from pipeline.storage import ObjectInfo
from pipeline.synthesis import Received, RequestProcessor
from pipeline.voices import ProfileResolver
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import SynthesisRequest


class CountingEngine:
    name = "counting"
    capabilities = Capabilities(("en",), ("sft",), False, False, "none")

    def __init__(self) -> None:
        self.calls = 0

    def load(self) -> None:
        pass

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        return Profile(voice_id, sha256, self.name)

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        self.calls += 1
        return [Synthesized(Audio(np.zeros(16000, np.float32), 16000), "en") for _ in batch]


class DictStore:
    """The four calls RequestProcessor makes, over a dict; storage itself is tested on S3."""

    bucket = "b"

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, dict[str, str]]] = {}

    def stat(self, key: str) -> ObjectInfo | None:
        if key not in self.objects:
            return None
        data, meta = self.objects[key]
        return ObjectInfo(key, len(data), meta)

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        self.objects[key] = (data, metadata or {})

    def presign(self, key: str, expires_s: int) -> str:
        return f"http://s3/{key}"


class FixedProfiles(ProfileResolver):
    def __init__(self, known: set[str]) -> None:
        self._known = known

    def resolve(self, voice_id: str, reference: str | None = None) -> Profile:
        if voice_id not in self._known:
            raise InvalidRequest(ErrorCode.VOICE_NOT_FOUND, f"voice {voice_id!r} is not registered")
        return Profile(voice_id, "0", "counting")


def _processor() -> tuple[RequestProcessor, CountingEngine, DictStore]:
    engine, store = CountingEngine(), DictStore()
    processor = RequestProcessor(engine=engine, store=store,  # type: ignore[arg-type]
                                 profiles=FixedProfiles({"v"}), worker="w", presign_seconds=60)
    return processor, engine, store


def _received() -> Received:
    return Received(timestamp=datetime(2026, 1, 2, tzinfo=UTC))


def test_expired_request_is_answered_without_synthesis() -> None:
    processor, engine, store = _processor()
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    result = processor.process(SynthesisRequest(request_id="r", voice_id="v", text="hi",
                                                deadline=past), _received())
    assert result.status == "expired"
    assert result.error is not None and result.error.code == "deadline_exceeded"
    assert engine.calls == 0 and not store.objects


def test_unknown_voice_is_rejected_with_voice_not_found() -> None:
    processor, engine, _ = _processor()
    result = processor.process(SynthesisRequest(request_id="r", voice_id="ghost", text="hi"),
                               _received())
    assert result.status == "rejected"
    assert result.error is not None and result.error.code == "voice_not_found"
    assert engine.calls == 0


def test_success_stores_once_and_a_repeat_is_served_from_the_object() -> None:
    processor, engine, store = _processor()
    request = SynthesisRequest(request_id="r", voice_id="v", text="hi", metadata={"k": 1})
    assert not store.objects
    first = processor.process(request, _received())
    assert first.status == "succeeded" and first.audio is not None
    assert first.audio.key == "audio/2026/01/02/r.wav"
    assert first.metadata == {"k": 1}
    assert set(first.timings_ms) >= {"queued", "profile", "synthesis", "encode", "upload", "total"}
    again = processor.process(request, _received())
    assert engine.calls == 1
    assert list(store.objects) == ["audio/2026/01/02/r.wav"]
    assert again.audio is not None and again.audio.sha256 == first.audio.sha256


def test_out_of_memory_on_a_batch_retries_it_smaller_and_fails_only_the_culprit() -> None:
    from pipeline.engines.bench import OOM_BATCH_MARKER, OOM_MARKER, BenchEngine

    engine, store = BenchEngine(), DictStore()
    splits: list[int] = []
    processor = RequestProcessor(engine=engine, store=store,  # type: ignore[arg-type]
                                 profiles=FixedProfiles({"v"}), worker="w", presign_seconds=60,
                                 on_oom_split=lambda: splits.append(1))
    texts = ["one", f"two {OOM_BATCH_MARKER}", "three", "four", f"five {OOM_MARKER}"]
    batch = [(SynthesisRequest(request_id=f"r{i}", voice_id="v", text=t), _received())
             for i, t in enumerate(texts)]
    outcomes = processor.process_batch(batch)
    assert [getattr(o, "status", None) for o in outcomes[:4]] == ["succeeded"] * 4
    assert isinstance(outcomes[4], VoiceFactoryError) and outcomes[4].retryable
    assert splits and processor.oom_splits == len(splits)
    assert len(store.objects) == 4
