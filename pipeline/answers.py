"""Result events for requests that never reached the synthesis stages.

A record the worker could not decode into a valid request (`InvalidRequest` with a
request_id) is answered `rejected`; a request whose retries ran out is answered `failed`; a
request that a tts.control cancel reached before the engine did is answered `cancelled`.
Both carry who answered (engine, worker) like every other result, so one small object built
at wiring time makes them: worker loop -> `Answers.rejected/failed/cancelled` -> Publisher.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import ErrorInfo, SynthesisRequest, SynthesisResult


def now_iso() -> str:
    """UTC now as RFC 3339 with milliseconds and a `Z`, the format of every event time."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Answers:
    engine: str  # the engine's name, as in every result
    worker: str  # the worker instance that answers

    def rejected(self, exc: InvalidRequest) -> SynthesisResult:
        """The record parsed far enough to name its request, but breaks a rule."""
        if exc.request_id is None:
            raise ValueError("a request without a request_id cannot be answered; "
                             "its bytes belong in the DLQ")
        return SynthesisResult(
            request_id=exc.request_id, voice_id=exc.voice_id or "", status="rejected",
            completed_at=now_iso(),
            error=ErrorInfo(code=exc.code.value, message=exc.message, retryable=False),
            engine=self.engine, worker=self.worker)

    def failed(self, request: SynthesisRequest, error: VoiceFactoryError,
               attempt: int) -> SynthesisResult:
        """The request's retries ran out; `retryable` tells its producer a resubmit may work."""
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status="failed",
            completed_at=now_iso(),
            error=ErrorInfo(code=error.code.value, message=error.message, retryable=True),
            job=request.job, metadata=request.metadata, engine=self.engine,
            worker=self.worker, attempt=attempt, tenant=request.tenant)

    def cancelled(self, request: SynthesisRequest, *, attempt: int = 1,
                  reason: str | None = None, queued_ms: float | None = None,
                  ) -> SynthesisResult:
        """A cancel named the request (or its job) before synthesis: no audio, and resubmitting
        the same request would only be cancelled again while the cancel is remembered."""
        message = "cancelled before synthesis" + (f": {reason}" if reason else "")
        return SynthesisResult(
            request_id=request.request_id, voice_id=request.voice_id, status="cancelled",
            completed_at=now_iso(),
            error=ErrorInfo(code=ErrorCode.CANCELLED.value, message=message, retryable=False),
            job=request.job, metadata=request.metadata, engine=self.engine,
            worker=self.worker, attempt=attempt, tenant=request.tenant,
            timings_ms={} if queued_ms is None else {"queued": round(queued_ms, 2),
                                                     "total": round(queued_ms, 2)})
