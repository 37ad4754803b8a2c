"""process_stream without a server: the chunks, the stored object they make, cancellation
and the early answers, over the real bench engine and a dict store."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from types import TracebackType

import numpy as np
import pytest
import soundfile as sf

from pipeline.audio import Audio
from pipeline.engines.base import Profile
from pipeline.engines.bench import BenchEngine
from pipeline.loudness import fast_loudness
from pipeline.streaming import ChunkShaper
from pipeline.synthesis import Received, RequestProcessor
from tests.unit.pipeline.test_synthesis import DictStore, FixedProfiles
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import SynthesisRequest, SynthesisResult

TEXT = "The first sentence is here. A second one follows it! And a third, to end."


class GettingStore(DictStore):
    def get(self, key: str) -> bytes | None:
        return self.objects[key][0] if key in self.objects else None


class ListSink:
    """Collects chunks; `cancel_after` chunks in, it says cancelled."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.chunks: list[tuple[bytes, int]] = []
        self.cancel_after = cancel_after
        self.asked = 0

    def chunk(self, pcm: bytes, sample_rate: int) -> None:
        self.chunks.append((pcm, sample_rate))

    def cancelled(self) -> bool:
        self.asked += 1
        return self.cancel_after is not None and len(self.chunks) >= self.cancel_after

    def samples(self) -> np.ndarray:
        return np.frombuffer(b"".join(pcm for pcm, _ in self.chunks), "<i2")


def processor(engine: BenchEngine | None = None
              ) -> tuple[RequestProcessor, BenchEngine, GettingStore]:
    engine = engine or BenchEngine(chunk_seconds=0.25)
    store = GettingStore()
    return RequestProcessor(engine=engine, store=store,  # type: ignore[arg-type]
                            profiles=FixedProfiles({"v"}), worker="w",
                            presign_seconds=60), engine, store


def request(**fields: object) -> SynthesisRequest:
    values: dict[str, object] = {"request_id": "r1", "voice_id": "v", "text": TEXT,
                                 "stream": True}
    values.update(fields)
    return SynthesisRequest(**values)  # type: ignore[arg-type]


def received() -> Received:
    return Received(timestamp=datetime(2026, 1, 2, tzinfo=UTC), queued_ms=5.0)


def stored_samples(store: GettingStore, result: SynthesisResult) -> tuple[np.ndarray, int]:
    assert result.audio is not None
    data, _ = store.objects[result.audio.key]
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    return pcm, rate


@pytest.mark.parametrize(("fmt", "rate"), [("wav", None), ("flac", None), ("wav", 16000),
                                           ("flac", 44100)])
def test_chunks_concatenated_are_the_stored_objects_samples(fmt: str, rate: int | None) -> None:
    proc, engine, store = processor()
    sink = ListSink()
    result = proc.process_stream(request(format=fmt, sample_rate=rate), received(), sink)
    assert isinstance(result, SynthesisResult) and result.status == "succeeded"
    assert len(sink.chunks) > 6  # three sentences of 0.25-s windows, and the gaps
    assert {r for _, r in sink.chunks} == {rate or 24000}
    pcm, stored_rate = stored_samples(store, result)
    assert stored_rate == (rate or 24000)
    assert np.array_equal(sink.samples(), pcm)
    assert result.audio is not None and result.audio.sample_rate == stored_rate
    assert result.timings_ms["first_chunk"] >= 5.0  # counts from the record's time
    assert engine.calls == 3  # one stream per sentence


def test_a_lossy_format_decodes_close_to_the_chunks() -> None:
    proc, _, store = processor()
    sink = ListSink()
    result = proc.process_stream(request(format="mp3", text="Only this one."), received(), sink)
    assert isinstance(result, SynthesisResult) and result.status == "succeeded"
    pcm, _ = stored_samples(store, result)
    chunks = sink.samples()
    assert abs(len(pcm) - len(chunks)) < 2400  # codec padding, not a different clip
    assert result.audio is not None and result.audio.format == "mp3"


def test_stream_gain_lands_near_the_loudness_target() -> None:
    proc, _, _ = processor()
    sink = ListSink()
    result = proc.process_stream(request(), received(), sink)
    assert isinstance(result, SynthesisResult)
    audio = Audio(sink.samples().astype(np.float32) / np.float32(32768), 24000)
    assert abs(fast_loudness(audio) - -16.0) < 3.0
    assert np.max(np.abs(audio.samples)) <= 10 ** (-1 / 20) + 1e-4


def test_a_cancelled_stream_stops_at_its_next_chunk_and_stores_nothing() -> None:
    engine = BenchEngine(chunk_seconds=0.25)
    proc, _, store = processor(engine)
    sink = ListSink(cancel_after=2)
    result = proc.process_stream(request(), received(), sink)
    assert isinstance(result, SynthesisResult)
    assert result.status == "cancelled" and result.error is not None
    assert result.error.code == ErrorCode.CANCELLED.value and not result.error.retryable
    assert len(sink.chunks) == 2 and not store.objects
    assert engine.calls == 1  # the first sentence's stream was closed, no other started
    assert engine._running == 0  # closed, not left suspended


def test_cancelled_before_the_engine_makes_no_call() -> None:
    proc, engine, store = processor()
    sink = ListSink(cancel_after=0)
    result = proc.process_stream(request(), received(), sink)
    assert isinstance(result, SynthesisResult) and result.status == "cancelled"
    assert engine.calls == 0 and not sink.chunks and not store.objects


def test_an_expired_stream_gets_no_chunks() -> None:
    proc, engine, _ = processor()
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    sink = ListSink()
    result = proc.process_stream(request(deadline=past), received(), sink)
    assert isinstance(result, SynthesisResult) and result.status == "expired"
    assert engine.calls == 0 and not sink.chunks


def test_an_already_stored_object_is_replayed_as_chunks() -> None:
    proc, engine, store = processor()
    first = proc.process_stream(request(), received(), ListSink())
    assert isinstance(first, SynthesisResult)
    again = ListSink()
    second = proc.process_stream(request(), received(), again)
    assert isinstance(second, SynthesisResult) and second.status == "succeeded"
    assert engine.calls == 3  # nothing synthesized the second time
    pcm, rate = stored_samples(store, second)
    assert np.array_equal(again.samples(), pcm) and {r for _, r in again.chunks} == {rate}
    assert len(again.chunks) == int(np.ceil(len(pcm) / rate))  # one-second pieces


@pytest.mark.parametrize(("text", "voice", "code", "retryable"), [
    ("[[bench:fail]] boom.", "v", ErrorCode.ENGINE_ERROR, True),
    ("Hello there.", "nobody", ErrorCode.VOICE_NOT_FOUND, False),
    ("[h][nonsense]", "v", ErrorCode.INVALID_REQUEST, False),
])
def test_failures_are_a_retryable_error_or_a_rejection(text: str, voice: str, code: ErrorCode,
                                                       retryable: bool) -> None:
    proc, _, store = processor()
    outcome = proc.process_stream(request(text=text, voice_id=voice), received(), ListSink())
    if retryable:
        assert isinstance(outcome, VoiceFactoryError) and outcome.retryable
        assert outcome.code is code
    else:
        assert isinstance(outcome, SynthesisResult) and outcome.status == "rejected"
        assert outcome.error is not None and outcome.error.code == code.value
    assert not store.objects


class CountingSlot:
    """A device slot stand-in: how often it was entered, and what ran inside it."""

    def __init__(self) -> None:
        self.entries = 0
        self.held = False
        self.seen: list[tuple[str, bool]] = []

    def __enter__(self) -> CountingSlot:
        self.entries += 1
        self.held = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.held = False


def test_one_device_slot_from_the_profile_lookup_to_the_last_chunk() -> None:
    """Taken once per stream, as an interactive batch holds one (consumers/worker/gate.py):
    a second entry would queue the stream twice before its first chunk. Storing the clip
    runs after the slot is given back."""
    slot = CountingSlot()

    class Profiles(FixedProfiles):
        def resolve(self, voice_id: str, reference: str | None = None, *,
                    tenant: str | None = None) -> Profile:
            slot.seen.append(("profile", slot.held))
            return super().resolve(voice_id, reference, tenant=tenant)

    class Store(GettingStore):
        def put(self, key: str, data: bytes, content_type: str,
                metadata: dict[str, str] | None = None) -> None:
            slot.seen.append(("put", slot.held))
            super().put(key, data, content_type, metadata)

    class Sink(ListSink):
        def chunk(self, pcm: bytes, sample_rate: int) -> None:
            slot.seen.append(("chunk", slot.held))
            super().chunk(pcm, sample_rate)

    proc = RequestProcessor(engine=BenchEngine(chunk_seconds=0.25), store=Store(),  # type: ignore[arg-type]
                            profiles=Profiles({"v"}), worker="w", presign_seconds=60,
                            device_gate=slot)
    result = proc.process_stream(request(), received(), Sink())
    assert isinstance(result, SynthesisResult) and result.status == "succeeded"
    assert slot.entries == 1
    assert slot.seen[0] == ("profile", True) and slot.seen[-1] == ("put", False)
    assert {held for stage, held in slot.seen if stage == "chunk"} == {True}
    slot.entries = 0  # a voice that is not there: one entry, rejected, given back
    rejected = proc.process_stream(request(request_id="r2", voice_id="nobody"), received(),
                                  ListSink())
    assert isinstance(rejected, SynthesisResult) and rejected.status == "rejected"
    assert slot.entries == 1 and not slot.held


def test_shaper_joins_sentences_with_a_gap_and_holds_back_only_the_fade() -> None:
    shaper = ChunkShaper(fmt="wav", sample_rate=None, target_lufs=-16.0)

    def tone(n: int) -> Audio:
        return Audio((0.1 * np.sin(np.arange(n) / 5)).astype(np.float32), 24000)

    out = [shaper.add(tone(2400))]
    assert len(out[0]) == 2400 - 240  # 10 ms held back for the fade-out
    out.append(shaper.end_sentence())
    assert len(out[1]) == 240 + 3600  # the faded tail, then 150 ms of silence
    assert not out[1][240:].any()
    out.append(shaper.add(tone(2400)))
    out.append(shaper.finish())
    total = np.concatenate(out)
    assert len(total) == 2400 + 3600 + 2400
    assert np.array_equal(np.concatenate(shaper.pcm), total)
    assert shaper.gain_db is not None and 0 < shaper.gain_db <= 12.0


def test_a_stream_reusing_a_request_id_is_rejected_without_a_chunk() -> None:
    proc, _, store = processor()
    first = proc.process_stream(request(), received(), ListSink())
    assert isinstance(first, SynthesisResult) and first.status == "succeeded"
    stored = dict(store.objects)
    sink = ListSink()
    reused = proc.process_stream(request(text="Another text entirely."), received(), sink)
    assert isinstance(reused, SynthesisResult) and reused.status == "rejected"
    assert reused.error is not None and reused.error.code == "request_id_reused"
    assert not sink.chunks and store.objects == stored
