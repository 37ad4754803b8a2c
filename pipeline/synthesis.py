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
`VoiceFactoryError` that the caller's retry policy handles. A request with `"stream": true`
goes through process_stream instead (pipeline.streaming), one at a time; what both paths
share (early answers, storing, the result) is pipeline.processing.
"""

from __future__ import annotations

import time

from pipeline import keys
from pipeline.encode import resample, target_rate
from pipeline.engines.base import EngineOutOfMemory, Profile, SynthesisItem, Synthesized
from pipeline.frontend import prepare
from pipeline.loudness import normalize_loudness
from pipeline.processing import Outcome, Pending, Received, ms
from pipeline.stitch import stitch
from pipeline.streaming import StreamStages
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError
from topics.events import SynthesisRequest, SynthesisResult

__all__ = ["Outcome", "Received", "RequestProcessor"]


class RequestProcessor(StreamStages):
    """The batch path here; the streamed path (process_stream) and what both share come
    from pipeline.streaming and pipeline.processing."""

    def process(self, request: SynthesisRequest, received: Received) -> SynthesisResult:
        """One request; raises its retryable error instead of returning it."""
        [outcome] = self.process_batch([(request, received)])
        if isinstance(outcome, VoiceFactoryError):
            raise outcome
        return outcome

    def process_batch(self, items: list[tuple[SynthesisRequest, Received]]) -> list[Outcome]:
        """Items must share one voice_id; outcomes come back in the same order."""
        outcomes: list[Outcome | None] = [None] * len(items)
        todo: list[Pending] = []
        for index, (request, received) in enumerate(items):
            pending = Pending(index, request, received,
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

    def _synthesize_all(self, todo: list[Pending]) -> list[Outcome]:
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
        profile_ms = ms(time.perf_counter() - t0)
        for p in todo:
            p.timings["profile"] = profile_ms
        return self._run_engine(profile, todo)

    def _run_engine(self, profile: Profile, todo: list[Pending]) -> list[Outcome]:
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
        return [self._store_one(p, outputs[a:b], profile, ms(engine_s), rtf)
                for p, (a, b) in zip(todo, spans, strict=True)]

    def _store_one(self, p: Pending, pieces: list[Synthesized], profile: Profile,
                   engine_ms: float, rtf: float) -> Outcome:
        request = p.request
        t0 = time.perf_counter()
        raw = stitch([piece.audio for piece in pieces])
        rate = target_rate(request.format, request.sample_rate, raw.sample_rate)
        audio, before, after = normalize_loudness(resample(raw, rate), self._loudness)
        quality = self._quality(p, raw, audio, profile, before, after)
        p.timings.update(synthesis=engine_ms, encode=ms(time.perf_counter() - t0))
        try:
            ref = self._store_clip(p, audio, pieces[0].language)
        except VoiceFactoryError as exc:
            return exc
        return self._answer(p, "succeeded", audio=ref, rtf=rtf, quality=quality)
