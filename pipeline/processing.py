"""What the batch path (pipeline.synthesis) and the streamed path (pipeline.streaming) share.

A request becomes a `Pending` (its object key, fingerprint, timings, prepared text) ->
`early_answer`: cancelled meanwhile -> `cancelled`, deadline passed -> `expired`, object
already stored -> `answer_from` it: `succeeded` when it was made from this same request
(pipeline.fingerprint), else `rejected` (`request_id_reused`); else None ->
... the path's own synthesis ... -> `store_clip` (encode -> put with metadata, only where no
object is -> presign; an object that another writer stored first meanwhile -> `answer_from`
it) -> `answer` builds the `SynthesisResult`. `ProcessorCore` holds the engine, the store, the
profile resolver and the device semaphore both paths run under.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

from pipeline.answers import Answers, now_iso
from pipeline.audio import Audio
from pipeline.encode import CONTENT_TYPES, encode
from pipeline.engines.base import Profile, Synthesizer, VoiceMixer
from pipeline.fingerprint import Fingerprint, reuse_message
from pipeline.frontend import PreparedText
from pipeline.quality import assess
from pipeline.speaker import SpeakerEncoder
from pipeline.storage import ObjectInfo, ObjectStore
from pipeline.voices import ProfileResolver
from topics.errors import ErrorCode, VoiceFactoryError
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
    # CancelRegistry.checker): checked before synthesis.
    cancelled: Callable[[], bool] = _never


@dataclass
class Pending:
    index: int
    request: SynthesisRequest
    received: Received
    key: str
    started: float
    timings: dict[str, float] = field(default_factory=dict)
    prepared: PreparedText | None = None

    @cached_property
    def fingerprint(self) -> Fingerprint:
        return Fingerprint.of(self.request)


class ProcessorCore:
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

    @property
    def mixes_voices(self) -> bool:
        """Whether one engine call can hold several voices' items (a `VoiceMixer`)."""
        return isinstance(self._engine, VoiceMixer)

    def store_reachable(self) -> bool:
        return self._store.reachable()

    def _early_answer(self, p: Pending) -> SynthesisResult | None:
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
            return self._answer_from(p, existing)
        return None

    def _answer_from(self, p: Pending, existing: ObjectInfo) -> SynthesisResult:
        """The answer an object already stored under the request's key gives: a redelivery
        or an identical re-send is answered from it (written once, never synthesized
        twice); another request under the same request_id is refused, the object kept."""
        differing = p.fingerprint.differs_from(existing.metadata)
        if differing is not None:
            return self._reject(p, ErrorCode.REQUEST_ID_REUSED,
                                reuse_message(p.request.request_id, differing))
        audio = self._audio_ref(p.key, existing.metadata, existing.size, p.request.format)
        return self._answer(p, "succeeded", audio=audio)

    def _store_clip(self, p: Pending, audio: Audio, language: str,
                    voice_sha256: str) -> AudioRef | SynthesisResult:
        """Encode -> put where no object is yet (with what a redelivery answers from) ->
        presign. Adds the encode and upload timings; raises the store's VoiceFactoryError.
        When another writer stored the key first (a re-send in a concurrent batch or on
        another worker), this clip is dropped and the answer is that object's."""
        t0 = time.perf_counter()
        fmt = p.request.format
        data = encode(audio, fmt)
        t1 = time.perf_counter()
        meta = {"sha256": hashlib.sha256(data).hexdigest(),
                "duration_s": f"{audio.duration_s:.3f}", "sample_rate": str(audio.sample_rate),
                "language": language, "engine": self._engine.name,
                "voice-sha256": voice_sha256, **p.fingerprint.metadata()}
        stored = self._store.put_new(p.key, data, CONTENT_TYPES[fmt], metadata=meta)
        p.timings["encode"] = p.timings.get("encode", 0.0) + ms(t1 - t0)
        p.timings["upload"] = ms(time.perf_counter() - t1)
        if not stored:
            existing = self._store.stat(p.key)
            if existing is None or "sha256" not in existing.metadata:
                raise VoiceFactoryError(ErrorCode.STORAGE_ERROR,
                                        f"put {p.key}: refused, yet no finished object there",
                                        retryable=True)
            return self._answer_from(p, existing)
        return self._audio_ref(p.key, meta, len(data), fmt)

    def _quality(self, p: Pending, raw: Audio, final: Audio, profile: Profile,
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

    def _reject(self, p: Pending, code: ErrorCode, message: str) -> SynthesisResult:
        return self._answer(p, "rejected", error=ErrorInfo(code=code.value, message=message))

    def _answer(self, p: Pending, status: str, *, audio: AudioRef | None = None,
                error: ErrorInfo | None = None, rtf: float | None = None,
                quality: Quality | None = None) -> SynthesisResult:
        timings = dict(p.timings)
        timings["total"] = ms(time.perf_counter() - p.started) + timings.get("queued", 0.0)
        request = p.request
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status=status,  # type: ignore[arg-type]
            completed_at=now_iso(), audio=audio, error=error, job=request.job,
            metadata=request.metadata, timings_ms=timings, rtf=rtf, engine=self._engine.name,
            worker=self._worker, attempt=p.received.attempt, quality=quality,
            tenant=request.tenant)  # usage is counted per tenant from results


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
