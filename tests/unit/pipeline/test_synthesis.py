"""RequestProcessor decisions that need no server: expiry, rejection, stage order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

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
from topics.events import JobRef, SynthesisRequest, SynthesisResult


class CountingEngine:
    name = "counting"
    capabilities = Capabilities(("en",), ("sft",), False, False, "none")

    def __init__(self) -> None:
        self.calls = 0
        self.items = 0  # sentences synthesized, over all calls

    def load(self) -> None:
        pass

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        return Profile(voice_id, sha256, self.name)

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        self.calls += 1
        self.items += len(batch)
        return [Synthesized(Audio(np.zeros(16000, np.float32), 16000), "en") for _ in batch]


class DictStore:
    """The calls RequestProcessor makes, over a dict; storage itself is tested on S3."""

    bucket = "b"

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, dict[str, str]]] = {}
        self.puts: list[str] = []  # every key written, in order

    def stat(self, key: str) -> ObjectInfo | None:
        if key not in self.objects:
            return None
        data, meta = self.objects[key]
        return ObjectInfo(key, len(data), meta)

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        self.puts.append(key)
        self.objects[key] = (data, metadata or {})

    def put_new(self, key: str, data: bytes, content_type: str,
                metadata: dict[str, str] | None = None) -> bool:
        if key in self.objects:  # as S3 answers `If-None-Match: *` with 412
            return False
        self.put(key, data, content_type, metadata)
        return True

    def presign(self, key: str, expires_s: int) -> str:
        return f"http://s3/{key}"


class FixedProfiles(ProfileResolver):
    def __init__(self, known: set[str]) -> None:
        self._known = known

    def resolve(self, voice_id: str, reference: str | None = None, *,
                tenant: str | None = None) -> Profile:
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


def test_a_reused_request_id_with_other_text_is_rejected_and_the_object_kept() -> None:
    processor, engine, store = _processor()
    first = processor.process(SynthesisRequest(request_id="r", voice_id="v", text="hi"),
                              _received())
    assert first.status == "succeeded"
    before = dict(store.objects)
    other = processor.process(SynthesisRequest(request_id="r", voice_id="v", text="bye",
                                               speed=1.5), _received())
    assert other.status == "rejected" and other.audio is None
    assert other.error is not None and other.error.code == "request_id_reused"
    assert not other.error.retryable
    assert "text, speed" in other.error.message and "bye" not in other.error.message
    assert engine.calls == 1 and store.objects == before


def test_an_object_stored_before_fingerprints_answers_any_request_under_its_key() -> None:
    processor, engine, store = _processor()
    store.objects["audio/2026/01/02/r.wav"] = (b"RIFF", {"sha256": "old", "sample_rate": "24000",
                                                         "duration_s": "1.000"})
    result = processor.process(SynthesisRequest(request_id="r", voice_id="v", text="new"),
                               _received())
    assert result.status == "succeeded" and result.audio is not None
    assert result.audio.sha256 == "old" and engine.calls == 0


def test_duplicates_in_one_batch_are_synthesized_and_stored_once() -> None:
    processor, engine, store = _processor()
    request = SynthesisRequest(request_id="r", voice_id="v", text="One sentence. And two.")
    copy = SynthesisRequest(request_id="r", voice_id="v", text="One sentence. And two.",
                            metadata={"copy": True}, job=JobRef(id="j", index=0, total=1))
    other = SynthesisRequest(request_id="s", voice_id="v", text="Another line.")
    late = Received(timestamp=datetime(2026, 1, 2, tzinfo=UTC), attempt=2)
    outcomes = processor.process_batch([(request, _received()), (other, _received()),
                                        (copy, late)])
    assert engine.calls == 1 and engine.items == 3  # two sentences of r, one of s
    assert store.puts == ["audio/2026/01/02/r.wav", "audio/2026/01/02/s.wav"]
    a, _, b = outcomes
    assert isinstance(a, SynthesisResult) and isinstance(b, SynthesisResult)
    assert a.status == b.status == "succeeded" and a.audio == b.audio
    assert (a.metadata, a.job, a.attempt) == (None, None, 1)
    assert (b.metadata, b.job, b.attempt) == ({"copy": True}, copy.job, 2)  # its own record's


def test_same_request_id_other_request_in_one_batch_the_first_wins() -> None:
    processor, engine, store = _processor()
    outcomes = processor.process_batch([
        (SynthesisRequest(request_id="r", voice_id="v", text="The first text."), _received()),
        (SynthesisRequest(request_id="r", voice_id="v", text="A second text."), _received())])
    first, second = outcomes
    assert isinstance(first, SynthesisResult) and first.status == "succeeded"
    assert isinstance(second, SynthesisResult) and second.status == "rejected"
    assert second.error is not None and second.error.code == "request_id_reused"
    assert "text" in second.error.message
    assert engine.items == 1 and len(store.objects) == 1


@pytest.mark.parametrize(("text", "status"), [("hi", "succeeded"), ("bye", "rejected")])
def test_an_object_stored_by_another_writer_meanwhile_decides_the_answer(
        text: str, status: str) -> None:
    """Two batches (or workers) synthesizing one key at once: the conditional put lets one
    write; the other's clip is dropped and it answers from what was stored."""
    engine, store, elsewhere = CountingEngine(), RacedStore(), DictStore()
    processor = RequestProcessor(engine=engine, store=store,  # type: ignore[arg-type]
                                 profiles=FixedProfiles({"v"}), worker="w", presign_seconds=60)
    winner = RequestProcessor(engine=CountingEngine(), store=elsewhere,  # type: ignore[arg-type]
                              profiles=FixedProfiles({"v"}), worker="w2", presign_seconds=60)
    first = winner.process(SynthesisRequest(request_id="r", voice_id="v", text="hi"),
                           _received())
    assert first.audio is not None
    store.arriving = elsewhere.objects
    result = processor.process(SynthesisRequest(request_id="r", voice_id="v", text=text),
                               _received())
    assert engine.calls == 1  # it did synthesize: the object was not there at first
    assert result.status == status
    key = "audio/2026/01/02/r.wav"
    assert store.objects[key] == elsewhere.objects[key]  # the first writer's, kept
    if status == "succeeded":
        assert result.audio is not None and result.audio.sha256 == first.audio.sha256
    else:
        assert result.error is not None and result.error.code == "request_id_reused"


class RacedStore(DictStore):
    """Empty when asked first; the other writer's objects land just before the put."""

    def __init__(self) -> None:
        super().__init__()
        self.arriving: dict[str, tuple[bytes, dict[str, str]]] = {}

    def put_new(self, key: str, data: bytes, content_type: str,
                metadata: dict[str, str] | None = None) -> bool:
        self.objects.update(self.arriving)
        return super().put_new(key, data, content_type, metadata)


def _bench_processor(voices: set[str]) -> tuple[RequestProcessor, DictStore]:
    from pipeline.engines.bench import BenchEngine

    store = DictStore()
    return RequestProcessor(engine=BenchEngine(), store=store,  # type: ignore[arg-type]
                            profiles=FixedProfiles(voices), worker="w",
                            presign_seconds=60), store


def test_a_mixing_engine_gets_one_call_for_several_voices_each_item_with_its_own_voice() -> None:
    processor, _ = _bench_processor({"v", "w"})
    assert processor.mixes_voices
    engine = processor._engine
    requests = [SynthesisRequest(request_id=f"r{i}", voice_id=voice, text=f"line {i}")
                for i, voice in enumerate(["v", "w", "ghost", "v"])]
    outcomes = processor.process_batch([(r, _received()) for r in requests])
    assert [getattr(o, "status", None) for o in outcomes] == [
        "succeeded", "succeeded", "rejected", "succeeded"]
    assert (engine.calls, engine.items) == (1, 3)  # type: ignore[attr-defined]
    # Each clip is what that voice alone makes: one call of one voice, on a fresh processor.
    for request, outcome in zip(requests, outcomes, strict=True):
        if request.voice_id == "ghost":
            continue
        alone, _ = _bench_processor({"v", "w"})
        single = alone.process(request, _received())
        assert isinstance(outcome, SynthesisResult) and outcome.audio and single.audio
        assert outcome.audio.sha256 == single.audio.sha256


def test_a_poison_item_in_a_mixed_batch_fails_alone() -> None:
    from pipeline.engines.bench import FAIL_MARKER

    processor, store = _bench_processor({"v", "w"})
    requests = [SynthesisRequest(request_id="a", voice_id="v", text="fine"),
                SynthesisRequest(request_id="b", voice_id="w", text=f"bad {FAIL_MARKER}"),
                SynthesisRequest(request_id="c", voice_id="w", text="fine too")]
    outcomes = processor.process_batch([(r, _received()) for r in requests])
    assert isinstance(outcomes[1], VoiceFactoryError) and outcomes[1].retryable
    assert [getattr(outcomes[i], "status", None) for i in (0, 2)] == ["succeeded"] * 2
    assert len(store.objects) == 2


def test_an_engine_that_cannot_mix_gets_one_call_a_voice() -> None:
    engine, store = CountingEngine(), DictStore()
    processor = RequestProcessor(engine=engine, store=store,  # type: ignore[arg-type]
                                 profiles=FixedProfiles({"v", "w"}), worker="w",
                                 presign_seconds=60)
    assert not processor.mixes_voices
    requests = [SynthesisRequest(request_id=f"r{i}", voice_id=voice, text="hi")
                for i, voice in enumerate(["v", "w", "v"])]
    outcomes = processor.process_batch([(r, _received()) for r in requests])
    assert [getattr(o, "status", None) for o in outcomes] == ["succeeded"] * 3
    assert (engine.calls, engine.items) == (2, 3)
