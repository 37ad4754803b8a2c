"""The bench engine: its cost model, its audio, its fault markers and its counters."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline.audio import Audio, speech_seconds
from pipeline.engines import create_engine
from pipeline.engines.base import EngineOutOfMemory, Profile, SynthesisItem, VoiceMeasures
from pipeline.engines.bench import BenchEngine
from pipeline.engines.espeak import median_f0
from topics.errors import ErrorCode, VoiceFactoryError

REFERENCE = Audio(np.zeros(2400, np.float32), 24000)


def profile(engine: BenchEngine, voice_id: str = "alice") -> Profile:
    return engine.profile(voice_id=voice_id, sha256="ab" * 32, reference=REFERENCE,
                          prompt_text=None, measures=VoiceMeasures(np.zeros(256, np.float32)))


def item(text: str = "x" * 50, speed: float = 1.0) -> SynthesisItem:
    return SynthesisItem(text=text, language="en", speed=speed)


def timed(engine: BenchEngine, batch: list[SynthesisItem]) -> float:
    p = profile(engine)
    engine.synthesize(p, [item()])  # warm numpy up so the measured call is the model's cost
    started = time.perf_counter()
    engine.synthesize(p, batch)
    return time.perf_counter() - started


def test_audio_length_follows_text_and_speed() -> None:
    engine = BenchEngine()
    p = profile(engine)
    out = engine.synthesize(p, [item("x" * 50), item("x" * 50, speed=2.0), item("hi")])
    assert [o.audio.duration_s for o in out] == pytest.approx([3.0, 1.5, 0.3], abs=1e-3)
    assert all(o.audio.sample_rate == 24000 for o in out)
    assert len(out) == 3


def test_audio_is_speech_like_at_the_profiles_pitch() -> None:
    engine = BenchEngine()
    p = profile(engine)
    audio = engine.synthesize(p, [item("a sentence of moderate length " * 3)])[0].audio
    assert audio.samples.dtype == np.float32
    assert float(np.max(np.abs(audio.samples))) == pytest.approx(0.3, abs=1e-3)
    assert median_f0(audio) == pytest.approx(p.features["pitch_hz"], rel=0.15)
    # syllables: loud most of the time, yet with dips between them
    assert 0.4 * audio.duration_s < speech_seconds(audio) <= audio.duration_s
    frames = audio.samples[: len(audio.samples) // 480 * 480].reshape(-1, 480)
    rms = np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1))
    assert rms.min() < 0.2 * rms.max()


def test_audio_is_deterministic_per_text_and_voice() -> None:
    engine = BenchEngine()
    alice, bob = profile(engine, "alice"), profile(engine, "bob")
    first = engine.synthesize(alice, [item("hello there")])[0].audio.samples
    again = BenchEngine().synthesize(alice, [item("hello there")])[0].audio.samples
    other_text = engine.synthesize(alice, [item("hello where")])[0].audio.samples
    other_voice = engine.synthesize(bob, [item("hello there")])[0].audio.samples
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other_text)
    assert not np.array_equal(first, other_voice)


def test_cost_model_base_and_per_item() -> None:
    engine = BenchEngine(base_ms=60, per_item_ms=20)
    assert 0.14 <= timed(engine, [item()] * 4) < 0.14 + 0.06


def test_cost_model_per_audio_second() -> None:
    engine = BenchEngine(per_audio_second_ms=40)
    # two items of 50 chars at 0.06 s/char = 6 s of audio -> 240 ms
    assert 0.24 <= timed(engine, [item(), item()]) < 0.24 + 0.06
    assert engine.cost_s(2, 6.0) == pytest.approx(0.24)


def test_no_cost_configured_means_no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("pipeline.engines.bench.time.sleep", slept.append)
    BenchEngine().synthesize(profile(BenchEngine()), [item()] * 8)
    assert slept == []
    BenchEngine(base_ms=1000).synthesize(profile(BenchEngine()), [item()])
    assert len(slept) == 1
    assert 0.9 < slept[0] <= 1.0  # the time spent making audio counts towards the cost


def test_from_env_reads_the_knobs() -> None:
    engine = BenchEngine.from_env({"VF_BENCH_BASE_MS": "12.5", "VF_BENCH_PER_ITEM_MS": "3",
                                   "VF_BENCH_PER_AUDIO_SECOND_MS": "7",
                                   "VF_BENCH_SECONDS_PER_CHAR": "0.1"})
    assert (engine.base_ms, engine.per_item_ms, engine.per_audio_second_ms,
            engine.seconds_per_char) == (12.5, 3.0, 7.0, 0.1)
    defaults = BenchEngine.from_env({})
    assert (defaults.base_ms, defaults.seconds_per_char) == (0.0, 0.06)
    with pytest.raises(ValueError, match="VF_BENCH_BASE_MS must be a number"):
        BenchEngine.from_env({"VF_BENCH_BASE_MS": "fast"})
    with pytest.raises(ValueError, match="per_item_ms"):
        BenchEngine(per_item_ms=-1)


def test_create_engine_builds_it_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "5")
    engine = create_engine("bench")
    assert isinstance(engine, BenchEngine)
    assert engine.base_ms == 5.0
    assert engine.capabilities.batching is True


def test_fail_marker_raises_a_retryable_engine_error() -> None:
    engine = BenchEngine()
    with pytest.raises(VoiceFactoryError) as info:
        engine.synthesize(profile(engine), [item("fine"), item("boom [[bench:fail]]")])
    assert info.value.code is ErrorCode.ENGINE_ERROR
    assert info.value.retryable is True
    assert not isinstance(info.value, EngineOutOfMemory)


def test_oom_markers() -> None:
    engine = BenchEngine()
    p = profile(engine)
    with pytest.raises(EngineOutOfMemory) as info:
        engine.synthesize(p, [item("[[bench:oom]]")])
    assert info.value.code is ErrorCode.ENGINE_ERROR and info.value.retryable
    with pytest.raises(EngineOutOfMemory):
        engine.synthesize(p, [item("ok"), item("[[bench:oom-batch]]")])
    assert len(engine.synthesize(p, [item("[[bench:oom-batch]]")])) == 1  # alone it fits


def test_markers_can_be_switched_off() -> None:
    engine = BenchEngine(fail_texts=False)
    assert len(engine.synthesize(profile(engine), [item("[[bench:fail]] [[bench:oom]]")])) == 1


def test_counters_see_concurrent_calls() -> None:
    engine = BenchEngine(base_ms=80)
    p = profile(engine)
    threads = [threading.Thread(target=engine.synthesize, args=(p, [item()] * 2))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (engine.calls, engine.items, engine.max_concurrent_seen) == (3, 6, 3)
    with pytest.raises(VoiceFactoryError):
        engine.synthesize(p, [item("[[bench:fail]]")])
    assert engine.calls == 4  # failed calls count too


# -- streams --------------------------------------------------------------------------------


def test_stream_is_the_batch_clip_in_windows_of_chunk_seconds() -> None:
    engine = BenchEngine(chunk_seconds=0.5)
    p = profile(engine)
    one = item("x" * 40)  # 2.4 s of audio
    [whole] = engine.synthesize(p, [one])
    chunks = list(engine.synthesize_stream(p, one))
    assert [len(c.samples) for c in chunks] == [12000] * 4 + [9600]
    assert {c.sample_rate for c in chunks} == {24000}
    assert np.array_equal(np.concatenate([c.samples for c in chunks]), whole.audio.samples)
    assert engine.capabilities.streaming


def test_stream_schedule_is_a_first_chunk_cost_then_a_real_time_factor() -> None:
    engine = BenchEngine(first_chunk_ms=200, per_audio_second_ms=100)
    assert engine.stream_schedule([0.5, 0.5, 0.2]) == pytest.approx([0.2, 0.25, 0.27])


def test_stream_pays_its_costs_as_it_goes() -> None:
    engine = BenchEngine(first_chunk_ms=150, per_audio_second_ms=200, chunk_seconds=0.5)
    p = profile(engine)
    list(engine.synthesize_stream(p, item("x" * 5)))  # warm up
    started = time.perf_counter()
    arrivals = []
    for _ in engine.synthesize_stream(p, item("x" * 25)):  # 1.5 s: three chunks
        arrivals.append(time.perf_counter() - started)
    assert len(arrivals) == 3
    assert 0.15 <= arrivals[0] < 0.15 + 0.08
    assert 0.35 <= arrivals[2] < 0.35 + 0.08  # 150 ms + 2 x (0.5 s x 200 ms/s)


def test_stream_knobs_come_from_the_environment() -> None:
    engine = BenchEngine.from_env({"VF_BENCH_FIRST_CHUNK_MS": "200",
                                   "VF_BENCH_CHUNK_SECONDS": "0.25",
                                   "VF_BENCH_PER_AUDIO_SECOND_MS": "100"})
    assert (engine.first_chunk_ms, engine.chunk_seconds, engine.per_audio_second_ms) == \
        (200.0, 0.25, 100.0)
    assert (BenchEngine.from_env({}).first_chunk_ms, BenchEngine.from_env({}).chunk_seconds) \
        == (0.0, 0.5)
    with pytest.raises(ValueError, match="chunk_seconds"):
        BenchEngine(chunk_seconds=0)


def test_stream_fault_markers_raise_before_the_first_chunk() -> None:
    engine = BenchEngine()
    with pytest.raises(VoiceFactoryError) as err:
        next(engine.synthesize_stream(profile(engine), item("[[bench:fail]] hello")))
    assert err.value.retryable and err.value.code is ErrorCode.ENGINE_ERROR
