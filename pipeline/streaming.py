"""One streamed request (`"stream": true`), start to finish, without Kafka.

process_stream(request, received, sink):
  deadline passed -> `expired`; object already stored -> its samples replayed to the sink
  as chunks, then `succeeded` from it; cancelled before the engine -> `cancelled`;
  front-end (bad text -> `rejected`) -> one device slot, taken once: profile (as the batch
  path) -> per sentence: engine.synthesize_stream -> per engine chunk: sink.cancelled()? ->
  stop, `cancelled`, nothing stored -> ChunkShaper: sentence joins (fades and a gap, as
  pipeline.stitch) -> resample to the request's rate (one soxr stream, no seams) -> the
  stream's gain -> soft limiter -> 16-bit PCM -> sink.chunk(pcm, rate) -> slot given back
  -> the stored object is exactly the concatenated PCM: quality signals -> encode -> put
  -> presign -> `succeeded`.

One slot for the profile lookup and the engine call: nothing runs between them, and giving
the slot back there would make the stream queue for a slot twice before its first chunk (the
worker's interactive calls hold theirs the same way: consumers/worker/gate.py, in_lane).

Loudness: the batch path normalises the whole clip to the target; a stream cannot wait for
the whole clip, so its gain is fixed on the first chunk that carries signal (its loudness
against the target, at most +12 dB, at most -24 dB) and kept for the rest, with the same
soft limiter keeping peaks under -1 dBFS. A streamed clip lands near the target, not on it;
its quality signals report the loudness before and after as measured on the whole clip.

The stored object holds the chunks' samples: WAV and FLAC decode to exactly the
concatenated chunks; MP3 and Opus decode close to them, not equal (lossy codecs).
"""

from __future__ import annotations

import io
import logging
import math
import time
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import soundfile as sf
import soxr

from pipeline import keys
from pipeline.audio import Audio, Samples
from pipeline.encode import target_rate
from pipeline.engines.base import Profile, SynthesisItem
from pipeline.frontend import prepare
from pipeline.loudness import PEAK_CEILING, fast_loudness, soft_limit
from pipeline.processing import Outcome, Pending, ProcessorCore, Received, ms
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import ErrorInfo, SynthesisRequest, SynthesisResult

log = logging.getLogger(__name__)

GAP_MS = 150.0  # silence between sentences, as pipeline.stitch's default
FADE_MS = 10.0  # fade at each sentence join, as pipeline.stitch's default
MAX_BOOST_DB = 12.0  # a quiet first chunk (a breath) must not blow up the rest
MAX_CUT_DB = 24.0
REPLAY_CHUNK_S = 1.0  # an already stored object goes to the sink in pieces this long


class ChunkSink(Protocol):
    """Where a streamed request's audio goes (the worker publishes it to tts.audio)."""

    def chunk(self, pcm: bytes, sample_rate: int) -> None:
        """16-bit little-endian mono PCM, in order; called from the processing thread."""

    def cancelled(self) -> bool:
        """True once the request was cancelled: the stream stops at its next chunk."""


class StreamCancelled(Exception):
    """The sink said cancelled between two chunks."""


class ChunkShaper:
    """Engine chunks (float32, one rate) -> the request's 16-bit PCM chunks, and the clip.

    add(audio) per engine chunk, end_sentence() after each sentence but the last, finish()
    once; each returns the PCM (int16 array) to hand out now, possibly empty. The last
    `fade` samples of a sentence are held back until its end is known, so joins cost no
    latency beyond 10 ms of audio.
    """

    def __init__(self, *, fmt: str, sample_rate: int | None, target_lufs: float) -> None:
        self._format = fmt
        self._requested = sample_rate  # the request's rate; None: the engine's
        self._target = target_lufs
        self.in_rate = 0
        self.out_rate = 0
        self._resampler: soxr.ResampleStream | None = None
        self._gain: float | None = None
        self._tail = np.zeros(0, np.float32)
        self._fade_in = 0  # samples of the next sentence's fade-in still to apply
        self._fade = 0
        self.raw: list[Samples] = []  # the joined signal before resampling and gain
        self.pcm: list[np.ndarray] = []  # everything handed out

    @property
    def gain_db(self) -> float | None:
        return None if self._gain is None else 20 * math.log10(self._gain)

    def add(self, audio: Audio) -> np.ndarray:
        if not self.in_rate:
            self._start(audio.sample_rate)
        x = audio.samples.astype(np.float32).reshape(-1)
        if audio.sample_rate != self.in_rate:  # an engine that changed rate mid-stream
            x = soxr.resample(x, audio.sample_rate, self.in_rate).astype(np.float32)
        if self._fade_in:
            done = self._fade - self._fade_in
            n = min(self._fade_in, len(x))
            x = x.copy()
            x[:n] *= np.linspace(0.0, 1.0, self._fade, dtype=np.float32)[done:done + n]
            self._fade_in -= n
        joined = np.concatenate([self._tail, x])
        keep = min(self._fade, len(joined))
        self._tail = joined[len(joined) - keep:]
        return self._out(joined[:len(joined) - keep])

    def end_sentence(self) -> np.ndarray:
        """A sentence ended and another follows: fade out, then the gap."""
        tail = self._tail * np.linspace(1.0, 0.0, len(self._tail), dtype=np.float32)
        self._tail = np.zeros(0, np.float32)
        self._fade_in = self._fade
        gap = np.zeros(int(self.in_rate * GAP_MS / 1000), np.float32)
        return self._out(np.concatenate([tail, gap]))

    def finish(self) -> np.ndarray:
        """The held-back tail and what the resampler still holds."""
        tail, self._tail = self._tail, np.zeros(0, np.float32)
        return self._out(tail, last=True)

    def clip(self) -> Audio:
        """What was handed out, as float32 (exactly the PCM: k / 32768)."""
        pcm = np.concatenate(self.pcm) if self.pcm else np.zeros(0, np.int16)
        return Audio(pcm.astype(np.float32) / np.float32(32768.0), self.out_rate)

    def raw_audio(self) -> Audio:
        return Audio(np.concatenate(self.raw) if self.raw else np.zeros(0, np.float32),
                     self.in_rate)

    def _start(self, rate: int) -> None:
        self.in_rate = rate
        self.out_rate = target_rate(self._format, self._requested, rate)
        self._fade = int(rate * FADE_MS / 1000)
        if self.out_rate != rate:
            self._resampler = soxr.ResampleStream(rate, self.out_rate, 1, dtype="float32")

    def _out(self, x: Samples, *, last: bool = False) -> np.ndarray:
        x = np.clip(x, -1.0, 1.0).astype(np.float32)
        self.raw.append(x)
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x, last=last).astype(np.float32)
        if not len(x):
            return np.zeros(0, np.int16)
        if self._gain is None:
            measured = fast_loudness(Audio(x, self.out_rate))
            if not math.isfinite(measured):
                return self._pcm(x)  # silence so far: any gain leaves it silent
            db = min(MAX_BOOST_DB, max(-MAX_CUT_DB, self._target - measured))
            self._gain = 10 ** (db / 20)
        y = soft_limit(x * np.float32(self._gain))
        return self._pcm(np.clip(y, -PEAK_CEILING, PEAK_CEILING))

    def _pcm(self, x: np.ndarray) -> np.ndarray:
        # As pipeline.encode.wav_pcm16 converts: x * 32768 rounded down, in the int16 range.
        scaled = np.floor(np.multiply(x, np.float32(32768.0), dtype=np.float32))
        pcm: np.ndarray = np.clip(scaled, -32768.0, 32767.0).astype(np.int16)
        self.pcm.append(pcm)
        return pcm


class StreamStages(ProcessorCore):
    def process_stream(self, request: SynthesisRequest, received: Received,
                       sink: ChunkSink) -> Outcome:
        """One streamed request: its chunks go to `sink` as they are made; returns the
        result (succeeded, rejected, expired, cancelled) or a retryable error, whose retry
        starts the stream again from its first chunk."""
        p = Pending(0, request, received,
                    keys.audio_key(request.request_id, request.format, received.timestamp,
                                   tenant=request.tenant),
                    time.perf_counter(), {"queued": round(received.queued_ms, 2)})
        try:
            early = self._early_answer(p)
            if early is not None:
                if early.status == "succeeded":
                    self._replay(p, sink)
                return early
        except VoiceFactoryError as exc:
            return exc
        if sink.cancelled():
            return self._cancelled(p, 0)
        try:
            p.prepared = prepare(request.text, language=request.language,
                                 instruct=request.instruct)
        except InvalidRequest as exc:
            return self._reject(p, exc.code, exc.message)
        shaper = ChunkShaper(fmt=request.format, sample_rate=request.sample_rate,
                             target_lufs=self._loudness)
        spent = [0.0]  # seconds inside the engine's next()
        t0 = time.perf_counter()
        with self._device:  # one slot for both (see the module docstring)
            try:
                profile = self._profiles.resolve(request.voice_id, request.reference,
                                                 tenant=request.tenant)
            except VoiceFactoryError as exc:
                return exc if exc.retryable and not isinstance(exc, InvalidRequest) \
                    else self._reject(p, exc.code, exc.message)
            p.timings["profile"] = ms(time.perf_counter() - t0)
            stopped = self._stream(p, profile, shaper, sink, spent)
        if stopped is not None:
            return stopped
        return self._store_stream(p, profile, shaper, spent[0])  # the slot given back

    def _stream(self, p: Pending, profile: Profile, shaper: ChunkShaper, sink: ChunkSink,
                spent: list[float]) -> Outcome | None:
        """The engine call, under the caller's device slot: None once every chunk is out,
        else why it stopped (cancelled, a retryable error, a rejection)."""
        assert p.prepared is not None
        request, prepared = p.request, p.prepared
        items = [SynthesisItem(text=sentence, language=prepared.language, speed=request.speed,
                               instruct=request.instruct, style=prepared.style)
                 for sentence in prepared.sentences]
        sent = 0

        def hand_out(pcm: np.ndarray) -> None:
            nonlocal sent
            if not len(pcm):
                return
            if sink.cancelled():
                raise StreamCancelled
            if not sent:
                p.timings["first_chunk"] = ms(time.perf_counter() - p.started) + \
                    p.timings["queued"]
                p.timings["engine_first_chunk"] = ms(time.perf_counter() - started)
            sink.chunk(pcm.astype("<i2").tobytes(), shaper.out_rate)
            sent += 1

        started = time.perf_counter()
        try:
            for index, item in enumerate(items):
                if index:
                    hand_out(shaper.end_sentence())
                chunks = self._engine.synthesize_stream(profile, item)
                try:
                    for audio in _timed(chunks, spent):
                        hand_out(shaper.add(audio))
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()  # an engine stopped early releases what it holds
            hand_out(shaper.finish())
        except StreamCancelled:
            return self._cancelled(p, sent)
        except VoiceFactoryError as exc:
            if exc.retryable:
                return exc
            return self._reject(p, exc.code, exc.message)
        return None

    def _store_stream(self, p: Pending, profile: Profile, shaper: ChunkShaper,
                      engine_s: float) -> Outcome:
        assert p.prepared is not None
        t0 = time.perf_counter()
        final, raw = shaper.clip(), shaper.raw_audio()
        if not len(final.samples):
            return VoiceFactoryError(ErrorCode.ENGINE_ERROR, "engine streamed no audio",
                                     retryable=True)
        before, after = fast_loudness(raw), fast_loudness(final)
        quality = self._quality(p, raw, final, profile, before, after)
        p.timings.update(synthesis=ms(engine_s), encode=ms(time.perf_counter() - t0))
        try:
            ref = self._store_clip(p, final, p.prepared.language, profile.sha256)
        except VoiceFactoryError as exc:
            return exc
        if isinstance(ref, SynthesisResult):  # stored first by another writer
            return ref
        rtf = round(engine_s / final.duration_s, 4) if final.duration_s else 0.0
        return self._answer(p, "succeeded", audio=ref, rtf=rtf, quality=quality)

    def _replay(self, p: Pending, sink: ChunkSink) -> None:
        """An object stored by an earlier attempt: its samples to the sink, so a reader of
        this attempt gets the audio too."""
        data = self._store.get(p.key)
        if data is None:
            log.warning("stored object vanished before its replay",
                        extra={"request_id": p.request.request_id})
            return
        pcm, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
        samples = pcm[:, 0]
        step = max(1, int(rate * REPLAY_CHUNK_S))
        for start in range(0, len(samples), step):
            if sink.cancelled():
                return  # the answer stays the stored object's: it exists
            if not start:
                p.timings["first_chunk"] = ms(time.perf_counter() - p.started) + \
                    p.timings["queued"]
            sink.chunk(samples[start:start + step].astype("<i2").tobytes(), int(rate))

    def _cancelled(self, p: Pending, sent: int) -> SynthesisResult:
        return self._answer(p, "cancelled", error=ErrorInfo(
            code=ErrorCode.CANCELLED.value, retryable=False,
            message=f"cancelled after {sent} chunks; nothing stored"))


def _timed(chunks: Iterator[Audio], spent: list[float]) -> Iterator[Audio]:
    """The engine's chunks, with the time spent making them added up in spent[0]."""
    while True:
        t0 = time.perf_counter()
        audio = next(chunks, None)
        spent[0] += time.perf_counter() - t0
        if audio is None:
            return
        yield audio
