"""Requests of one voice, start to finish, without Kafka: the stages a worker runs.

process_batch(items of one voice):
  per item: cancelled meanwhile? -> `cancelled`; deadline passed? -> `expired`; object
  already stored? -> answer from it;
  text front-end (normalise, split into sentences, parse the instruction; bad annotations
  -> `rejected`)
  profile once for the voice -> one engine call for every sentence of the rest (out of
  memory: split the batch in halves, down to single requests; another engine error on a
  batch: retry one by one so a poison item fails alone) -> per item: stitch its sentences ->
  resample -> loudness-normalise -> quality signals -> encode -> put object -> presign.
Every item ends as a `SynthesisResult` or, for a transient failure, a retryable
`VoiceFactoryError` that the caller's retry policy handles.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipeline import keys
from pipeline.answers import Answers, now_iso
from pipeline.audio import Audio
from pipeline.encode import CONTENT_TYPES, encode, resample, target_rate
from pipeline.engines.base import (
    EngineOutOfMemory,
    Profile,
    SynthesisItem,
    Synthesized,
    Synthesizer,
)
from pipeline.frontend import PreparedText, prepare
from pipeline.loudness import normalize_loudness
from pipeline.quality import assess
from pipeline.speaker import SpeakerEncoder
from pipeline.stitch import stitch
from pipeline.storage import ObjectStore
from pipeline.voices import ProfileResolver
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import AudioRef, ErrorInfo, Quality, SynthesisRequest, SynthesisResult
from topics.validation import parse_deadline

Outcome = SynthesisResult | VoiceFactoryError


def _never() -> bool:
    return False


@dataclass(frozen=True)
class Received:
    """Where a request came from; `timestamp` (the Kafka record time) fixes its object key."""

    timestamp: datetime
    queued_ms: float = 0.0
    attempt: int = 1
    # Whether a cancel reached the request since the worker took it (the worker passes its
    # CancelRegistry.checker): checked before synthesis; a streaming sink checks between chunks.
    cancelled: Callable[[], bool] = _never


@dataclass
class _Pending:
    index: int
    request: SynthesisRequest
    received: Received
    key: str
    started: float
    timings: dict[str, float] = field(default_factory=dict)
    prepared: PreparedText | None = None


class RequestProcessor:
    def __init__(self, *, engine: Synthesizer, store: ObjectStore, profiles: ProfileResolver,
                 worker: str, presign_seconds: int, loudness_lufs: float = -16.0,
                 quality_encoder: SpeakerEncoder | None = None, device_slots: int | None = None,
                 on_oom_split: Callable[[], None] | None = None,
                 device_gate: contextlib.AbstractContextManager[object] | None = None) -> None:
        self._engine = engine
        # At most `device_slots` threads in the engine (or computing a profile) at once; the
        # stitching, encoding and upload after it run outside, so a caller may run more
        # batches than slots and keep the device busy while earlier outputs are stored.
        # `device_gate` replaces that semaphore when the caller orders its waiters (the
        # worker's lanes: consumers/worker/gate.py).
        self._device: contextlib.AbstractContextManager[object] = device_gate or (
            threading.BoundedSemaphore(device_slots) if device_slots
            else contextlib.nullcontext())
        self._loudness = loudness_lufs
        # Scoring synthetic audio (the bench engine) says nothing: engines opt out.
        self._scorer = quality_encoder if engine.capabilities.speech else None
        self._on_oom_split = on_oom_split or (lambda: None)
        self._store = store
        self._profiles = profiles
        self._worker = worker
        self._presign_seconds = presign_seconds
        self.oom_splits = 0
        # Answers for requests that never reach the stages below (invalid, out of retries).
        self.answers = Answers(engine=engine.name, worker=worker)

    def store_reachable(self) -> bool:
        return self._store.reachable()

    def process(self, request: SynthesisRequest, received: Received) -> SynthesisResult:
        """One request; raises its retryable error instead of returning it."""
        [outcome] = self.process_batch([(request, received)])
        if isinstance(outcome, VoiceFactoryError):
            raise outcome
        return outcome

    def process_batch(self, items: list[tuple[SynthesisRequest, Received]]) -> list[Outcome]:
        """Items must share one voice_id; outcomes come back in the same order."""
        outcomes: list[Outcome | None] = [None] * len(items)
        todo: list[_Pending] = []
        for index, (request, received) in enumerate(items):
            pending = _Pending(index, request, received,
                               keys.audio_key(request.request_id, request.format,
                                              received.timestamp), time.perf_counter(),
                               {"queued": round(received.queued_ms, 2)})
            try:
                early = self._early_answer(pending)
            except VoiceFactoryError as exc:
                outcomes[index] = exc
                continue
            if early is not None:
                outcomes[index] = early
                continue
            try:
                pending.prepared = prepare(request.text, language=request.language,
                                           instruct=request.instruct)
            except InvalidRequest as exc:
                outcomes[index] = self._reject(pending, exc.code, exc.message)
                continue
            todo.append(pending)
        if todo:
            for pending, outcome in zip(todo, self._synthesize_all(todo), strict=True):
                outcomes[pending.index] = outcome
        assert all(o is not None for o in outcomes)
        return [o for o in outcomes if o is not None]

    def _early_answer(self, p: _Pending) -> SynthesisResult | None:
        request = p.request
        if p.received.cancelled():
            return self.answers.cancelled(request, attempt=p.received.attempt,
                                          queued_ms=p.received.queued_ms)
        deadline = parse_deadline(request.deadline) if request.deadline else None
        if deadline is not None and deadline < datetime.now(UTC):
            return self._answer(p, "expired", error=ErrorInfo(
                code=ErrorCode.DEADLINE_EXCEEDED.value,
                message=f"deadline {request.deadline} passed before synthesis started"))
        existing = self._store.stat(p.key)
        if existing is not None and "sha256" in existing.metadata:
            # Redelivery: the object is written once, the answer is rebuilt from it.
            audio = self._audio_ref(p.key, existing.metadata, existing.size, request.format)
            return self._answer(p, "succeeded", audio=audio)
        return None

    def _synthesize_all(self, todo: list[_Pending]) -> list[Outcome]:
        t0 = time.perf_counter()
        try:
            first = todo[0].request
            with self._device:
                profile = self._profiles.resolve(first.voice_id, first.reference)
        except InvalidRequest as exc:
            return [self._reject(p, exc.code, exc.message) for p in todo]
        except VoiceFactoryError as exc:
            if exc.retryable:
                return [exc for _ in todo]
            return [self._reject(p, exc.code, exc.message) for p in todo]
        profile_ms = _ms(time.perf_counter() - t0)
        for p in todo:
            p.timings["profile"] = profile_ms
        return self._run_engine(profile, todo)

    def _run_engine(self, profile: Profile, todo: list[_Pending]) -> list[Outcome]:
        batch: list[SynthesisItem] = []
        spans: list[tuple[int, int]] = []
        for p in todo:
            assert p.prepared is not None
            start = len(batch)
            batch.extend(SynthesisItem(text=sentence, language=p.prepared.language,
                                       speed=p.request.speed, instruct=p.request.instruct,
                                       style=p.prepared.style)
                         for sentence in p.prepared.sentences)
            spans.append((start, len(batch)))
        t0 = time.perf_counter()
        try:
            with self._device:
                outputs = self._engine.synthesize(profile, batch)
        except EngineOutOfMemory as exc:
            if len(todo) == 1:
                return [exc]
            self.oom_splits += 1
            self._on_oom_split()
            half = len(todo) // 2
            return self._run_engine(profile, todo[:half]) + self._run_engine(profile, todo[half:])
        except VoiceFactoryError as exc:
            if len(todo) > 1:  # find the item that fails, let the others through
                return [o for p in todo for o in self._run_engine(profile, [p])]
            if exc.retryable:
                return [exc]
            return [self._reject(todo[0], exc.code, exc.message)]
        engine_s = time.perf_counter() - t0
        if len(outputs) != len(batch):
            return [VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                      f"engine returned {len(outputs)} clips for "
                                      f"{len(batch)} sentences") for _ in todo]
        audio_s = sum(o.audio.duration_s for o in outputs)
        rtf = round(engine_s / audio_s, 4) if audio_s else 0.0
        return [self._store_one(p, outputs[a:b], profile, _ms(engine_s), rtf)
                for p, (a, b) in zip(todo, spans, strict=True)]

    def _store_one(self, p: _Pending, pieces: list[Synthesized], profile: Profile,
                   engine_ms: float, rtf: float) -> Outcome:
        request = p.request
        t0 = time.perf_counter()
        raw = stitch([piece.audio for piece in pieces])
        rate = target_rate(request.format, request.sample_rate, raw.sample_rate)
        audio, before, after = normalize_loudness(resample(raw, rate), self._loudness)
        quality = self._quality(p, raw, audio, profile, before, after)
        data = encode(audio, request.format)
        t1 = time.perf_counter()
        meta = {"sha256": hashlib.sha256(data).hexdigest(),
                "duration_s": f"{audio.duration_s:.3f}", "sample_rate": str(rate),
                "language": pieces[0].language, "engine": self._engine.name}
        try:
            self._store.put(p.key, data, CONTENT_TYPES[request.format], metadata=meta)
            ref = self._audio_ref(p.key, meta, len(data), request.format)
        except VoiceFactoryError as exc:
            return exc
        p.timings.update(synthesis=engine_ms, encode=_ms(t1 - t0),
                         upload=_ms(time.perf_counter() - t1))
        return self._answer(p, "succeeded", audio=ref, rtf=rtf, quality=quality)

    def _quality(self, p: _Pending, raw: Audio, final: Audio, profile: Profile,
                 before: float, after: float) -> Quality:
        assert p.prepared is not None
        return assess(raw, final, text=" ".join(p.prepared.sentences),
                      reference_embedding=profile.tensors.get("speaker_embedding"),
                      encoder=self._scorer, loudness_before=before, loudness_after=after,
                      target_lufs=self._loudness,
                      speaking_rate=profile.features.get("speaking_rate"),
                      speed=p.request.speed * (p.prepared.style.speed or 1.0))

    def _audio_ref(self, key: str, meta: dict[str, str], size: int, fmt: str) -> AudioRef:
        return AudioRef(bucket=self._store.bucket, key=key,
                        url=self._store.presign(key, self._presign_seconds), format=fmt,
                        sample_rate=int(meta.get("sample_rate", "0")),
                        duration_s=float(meta.get("duration_s", "0")), bytes=size,
                        sha256=meta.get("sha256", ""))

    def _reject(self, p: _Pending, code: ErrorCode, message: str) -> SynthesisResult:
        return self._answer(p, "rejected", error=ErrorInfo(code=code.value, message=message))

    def _answer(self, p: _Pending, status: str, *, audio: AudioRef | None = None,
                error: ErrorInfo | None = None, rtf: float | None = None,
                quality: Quality | None = None) -> SynthesisResult:
        timings = dict(p.timings)
        timings["total"] = _ms(time.perf_counter() - p.started) + timings.get("queued", 0.0)
        request = p.request
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status=status,  # type: ignore[arg-type]
            completed_at=now_iso(), audio=audio, error=error, job=request.job,
            metadata=request.metadata, timings_ms=timings, rtf=rtf, engine=self._engine.name,
            worker=self._worker, attempt=p.received.attempt, quality=quality)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
