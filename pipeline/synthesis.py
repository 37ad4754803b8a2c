"""Requests of one voice, start to finish, without Kafka: the stages a worker runs.

process_batch(items of one voice):
  per item: deadline passed? -> `expired`; object already stored? -> answer from it
  profile once for the voice -> one engine call for the rest (out of memory: split the batch
  in halves, down to single items; another engine error on a batch: retry one by one so a
  poison item fails alone) -> per item: resample + encode -> put object -> presign -> result.
Every item ends as a `SynthesisResult` or, for a transient failure, a retryable
`VoiceFactoryError` that the caller's retry policy handles.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipeline import keys
from pipeline.encode import CONTENT_TYPES, encode, resample, target_rate
from pipeline.engines.base import (
    EngineOutOfMemory,
    Profile,
    SynthesisItem,
    Synthesized,
    Synthesizer,
)
from pipeline.storage import ObjectStore
from pipeline.voices import ProfileResolver
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import AudioRef, ErrorInfo, SynthesisRequest, SynthesisResult
from topics.validation import parse_deadline

Outcome = SynthesisResult | VoiceFactoryError


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Received:
    """Where a request came from; `timestamp` (the Kafka record time) fixes its object key."""

    timestamp: datetime
    queued_ms: float = 0.0
    attempt: int = 1


@dataclass
class _Pending:
    index: int
    request: SynthesisRequest
    received: Received
    key: str
    started: float
    timings: dict[str, float] = field(default_factory=dict)


class RequestProcessor:
    def __init__(self, *, engine: Synthesizer, store: ObjectStore, profiles: ProfileResolver,
                 worker: str, presign_seconds: int,
                 on_oom_split: Callable[[], None] | None = None) -> None:
        self._engine = engine
        self._on_oom_split = on_oom_split or (lambda: None)
        self._store = store
        self._profiles = profiles
        self._worker = worker
        self._presign_seconds = presign_seconds
        self.oom_splits = 0

    @property
    def engine_name(self) -> str:
        return self._engine.name

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
            else:
                todo.append(pending)
        if todo:
            for pending, outcome in zip(todo, self._synthesize_all(todo), strict=True):
                outcomes[pending.index] = outcome
        assert all(o is not None for o in outcomes)
        return [o for o in outcomes if o is not None]

    def _early_answer(self, p: _Pending) -> SynthesisResult | None:
        request = p.request
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
            profile = self._profiles.resolve(todo[0].request.voice_id)
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
        batch = [SynthesisItem(text=p.request.text, language=p.request.language,
                               speed=p.request.speed, instruct=p.request.instruct) for p in todo]
        t0 = time.perf_counter()
        try:
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
        audio_s = sum(o.audio.duration_s for o in outputs)
        rtf = round(engine_s / audio_s, 4) if audio_s else 0.0
        return [self._store_one(p, out, _ms(engine_s), rtf)
                for p, out in zip(todo, outputs, strict=True)]

    def _store_one(self, p: _Pending, out: Synthesized, engine_ms: float,
                   rtf: float) -> Outcome:
        request = p.request
        t0 = time.perf_counter()
        rate = target_rate(request.format, request.sample_rate, out.audio.sample_rate)
        audio = resample(out.audio, rate)
        data = encode(audio, request.format)
        t1 = time.perf_counter()
        meta = {"sha256": hashlib.sha256(data).hexdigest(),
                "duration_s": f"{audio.duration_s:.3f}", "sample_rate": str(rate),
                "language": out.language, "engine": self._engine.name}
        try:
            self._store.put(p.key, data, CONTENT_TYPES[request.format], metadata=meta)
            ref = self._audio_ref(p.key, meta, len(data), request.format)
        except VoiceFactoryError as exc:
            return exc
        p.timings.update(synthesis=engine_ms, encode=_ms(t1 - t0),
                         upload=_ms(time.perf_counter() - t1))
        return self._answer(p, "succeeded", audio=ref, rtf=rtf)

    def _audio_ref(self, key: str, meta: dict[str, str], size: int, fmt: str) -> AudioRef:
        return AudioRef(bucket=self._store.bucket, key=key,
                        url=self._store.presign(key, self._presign_seconds), format=fmt,
                        sample_rate=int(meta.get("sample_rate", "0")),
                        duration_s=float(meta.get("duration_s", "0")), bytes=size,
                        sha256=meta.get("sha256", ""))

    def _reject(self, p: _Pending, code: ErrorCode, message: str) -> SynthesisResult:
        return self._answer(p, "rejected", error=ErrorInfo(code=code.value, message=message))

    def _answer(self, p: _Pending, status: str, *, audio: AudioRef | None = None,
                error: ErrorInfo | None = None, rtf: float | None = None) -> SynthesisResult:
        timings = dict(p.timings)
        timings["total"] = _ms(time.perf_counter() - p.started) + timings.get("queued", 0.0)
        request = p.request
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status=status,  # type: ignore[arg-type]
            completed_at=now_iso(), audio=audio, error=error, job=request.job,
            metadata=request.metadata, timings_ms=timings, rtf=rtf, engine=self._engine.name,
            worker=self._worker, attempt=p.received.attempt)

    def rejected(self, request_id: str, voice_id: str | None, code: ErrorCode, message: str, *,
                 request: SynthesisRequest | None = None, attempt: int = 1,
                 status: str = "rejected", retryable: bool = False) -> SynthesisResult:
        return SynthesisResult(
            request_id=request_id, voice_id=voice_id or "", status=status,  # type: ignore[arg-type]
            completed_at=now_iso(),
            error=ErrorInfo(code=code.value, message=message, retryable=retryable),
            job=request.job if request else None, metadata=request.metadata if request else None,
            engine=self._engine.name, worker=self._worker, attempt=attempt)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
