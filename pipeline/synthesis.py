"""One request, start to finish, without Kafka: the stages a worker runs per message.

deadline check -> idempotency (object already stored? answer from it) -> voice profile ->
engine -> resample + encode -> put object -> presign -> `SynthesisResult`. Errors raised by a
stage become `rejected` (invalid input) or propagate as retryable for the caller's policy.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pipeline import keys
from pipeline.encode import CONTENT_TYPES, encode, resample, target_rate
from pipeline.engines.base import SynthesisItem, Synthesizer
from pipeline.storage import ObjectStore
from pipeline.voices import ProfileResolver
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import AudioRef, ErrorInfo, SynthesisRequest, SynthesisResult
from topics.validation import parse_deadline


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Received:
    """Where a request came from; `timestamp` (the Kafka record time) fixes its object key."""

    timestamp: datetime
    queued_ms: float = 0.0
    attempt: int = 1


class RequestProcessor:
    def __init__(self, *, engine: Synthesizer, store: ObjectStore, profiles: ProfileResolver,
                 worker: str, presign_seconds: int) -> None:
        self._engine = engine
        self._store = store
        self._profiles = profiles
        self._worker = worker
        self._presign_seconds = presign_seconds

    def process(self, request: SynthesisRequest, received: Received) -> SynthesisResult:
        """Returns a result for every outcome but a retryable error, which it raises."""
        started = time.perf_counter()
        timings = {"queued": round(received.queued_ms, 2)}
        deadline = parse_deadline(request.deadline) if request.deadline else None
        if deadline is not None and deadline < datetime.now(UTC):
            return self._answer(request, "expired", received, timings, started, error=ErrorInfo(
                code=ErrorCode.DEADLINE_EXCEEDED.value,
                message=f"deadline {request.deadline} passed before synthesis started"))
        key = keys.audio_key(request.request_id, request.format, received.timestamp)
        existing = self._store.stat(key)
        if existing is not None and "sha256" in existing.metadata:
            # Redelivery: the object is written once, the answer is rebuilt from it.
            audio = self._audio_ref(key, existing.metadata, existing.size, request.format)
            return self._answer(request, "succeeded", received, timings, started, audio=audio)
        try:
            audio_ref, rtf = self._synthesize(request, key, timings)
        except InvalidRequest as exc:
            return self.rejected(request.request_id, request.voice_id, exc.code, exc.message,
                                 request=request, attempt=received.attempt)
        except VoiceFactoryError as exc:
            if exc.retryable:
                raise
            return self._answer(request, "rejected", received, timings, started,
                                error=ErrorInfo(code=exc.code.value, message=exc.message))
        return self._answer(request, "succeeded", received, timings, started, audio=audio_ref,
                            rtf=rtf)

    def _synthesize(self, request: SynthesisRequest, key: str,
                    timings: dict[str, float]) -> tuple[AudioRef, float]:
        t0 = time.perf_counter()
        profile = self._profiles.resolve(request.voice_id)
        t1 = time.perf_counter()
        item = SynthesisItem(text=request.text, language=request.language, speed=request.speed,
                             instruct=request.instruct)
        [out] = self._engine.synthesize(profile, [item])
        t2 = time.perf_counter()
        rate = target_rate(request.format, request.sample_rate, out.audio.sample_rate)
        audio = resample(out.audio, rate)
        data = encode(audio, request.format)
        t3 = time.perf_counter()
        digest = hashlib.sha256(data).hexdigest()
        meta = {"sha256": digest, "duration_s": f"{audio.duration_s:.3f}",
                "sample_rate": str(rate), "language": out.language, "engine": self._engine.name}
        self._store.put(key, data, CONTENT_TYPES[request.format], metadata=meta)
        ref = self._audio_ref(key, meta, len(data), request.format)
        t4 = time.perf_counter()
        timings.update(profile=_ms(t1 - t0), synthesis=_ms(t2 - t1), encode=_ms(t3 - t2),
                       upload=_ms(t4 - t3))
        rtf = (t2 - t1) / audio.duration_s if audio.duration_s else 0.0
        return ref, round(rtf, 4)

    def _audio_ref(self, key: str, meta: dict[str, str], size: int, fmt: str) -> AudioRef:
        return AudioRef(bucket=self._store.bucket, key=key,
                        url=self._store.presign(key, self._presign_seconds), format=fmt,
                        sample_rate=int(meta.get("sample_rate", "0")),
                        duration_s=float(meta.get("duration_s", "0")), bytes=size,
                        sha256=meta.get("sha256", ""))

    def _answer(self, request: SynthesisRequest, status: str, received: Received,
                timings: dict[str, float], started: float, *, audio: AudioRef | None = None,
                error: ErrorInfo | None = None, rtf: float | None = None) -> SynthesisResult:
        timings["total"] = _ms(time.perf_counter() - started) + timings.get("queued", 0.0)
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status=status,  # type: ignore[arg-type]
            completed_at=now_iso(), audio=audio, error=error, job=request.job,
            metadata=request.metadata, timings_ms=timings, rtf=rtf, engine=self._engine.name,
            worker=self._worker, attempt=received.attempt)

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
