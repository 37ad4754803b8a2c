"""A batch of requests, start to finish, without Kafka: the stages a worker runs.

process_batch(items of one voice, or of several where the engine is a `VoiceMixer`):
  per item: a request_id already in the batch with another request? -> `rejected`
  (`request_id_reused`); cancelled meanwhile? -> `cancelled`; deadline passed? ->
  `expired`; object already stored? -> answer from it (`rejected` if made from another
  request); the same request already in the batch? -> shares that one's outcome;
  text front-end (normalise, split into sentences, parse the instruction; bad annotations
  -> `rejected`)
  profile once a voice (tenant, voice, ad-hoc reference) -> one engine call for every
  sentence of the rest (one a voice where the engine cannot mix voices; out of memory:
  split the batch in halves, down to single requests; another engine error on a batch:
  retry one by one so a poison item fails alone) -> per item: stitch its sentences ->
  resample -> loudness-normalise -> quality signals -> encode -> put object -> presign.
Every item ends as a `SynthesisResult` or, for a transient failure, a retryable
`VoiceFactoryError` that the caller's retry policy handles. A request with `"stream": true`
goes through process_stream instead (pipeline.streaming), one at a time; what both paths
share (early answers, storing, the result) is pipeline.processing.
"""

from __future__ import annotations

import time

import msgspec

from pipeline import keys
from pipeline.encode import resample, target_rate
from pipeline.engines.base import (
    EngineOutOfMemory,
    Profile,
    SynthesisItem,
    Synthesized,
    VoiceMixer,
)
from pipeline.fingerprint import reuse_message
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
        """Items of any voices and tenants, each voice's profile resolved once (the worker
        batches one voice's requests, or several voices' where the engine mixes them);
        outcomes come back in the same order.

        Records naming one request_id: the first is the request; a later one with another
        fingerprint is `rejected` (`request_id_reused`), and one with the same is synthesized
        and stored once with the first and answered with its outcome (with its own job,
        metadata and attempt: results are deduplicated by request_id downstream).
        """
        outcomes: list[Outcome | None] = [None] * len(items)
        first_of: dict[str, Pending] = {}  # request_id -> its first record here
        todo: dict[str, Pending] = {}  # request_id -> the record synthesized for it
        copies: dict[int, Pending] = {}  # index -> the record whose outcome it shares
        for index, (request, received) in enumerate(items):
            key = keys.audio_key(request.request_id, request.format, received.timestamp,
                                 tenant=request.tenant)
            pending = Pending(index, request, received, key, time.perf_counter(),
                              {"queued": round(received.queued_ms, 2)})
            first = first_of.setdefault(request.request_id, pending)
            if first.fingerprint != pending.fingerprint:
                outcomes[index] = self._reject(pending, ErrorCode.REQUEST_ID_REUSED, reuse_message(
                    request.request_id, pending.fingerprint.changed(first.fingerprint)))
                continue
            try:
                early = self._early_answer(pending)
            except VoiceFactoryError as exc:
                outcomes[index] = exc
                continue
            if early is not None:
                outcomes[index] = early
                continue
            if request.request_id in todo:
                copies[index] = todo[request.request_id]
                continue
            try:
                pending.prepared = prepare(request.text, language=request.language,
                                           instruct=request.instruct)
            except InvalidRequest as exc:
                outcomes[index] = self._reject(pending, exc.code, exc.message)
                continue
            todo[request.request_id] = pending
        if todo:
            pendings = list(todo.values())
            for pending, outcome in zip(pendings, self._synthesize_all(pendings), strict=True):
                outcomes[pending.index] = outcome
        for index, leader in copies.items():
            outcomes[index] = _shared(outcomes[leader.index], *items[index])
        assert all(o is not None for o in outcomes)
        return [o for o in outcomes if o is not None]

    def _synthesize_all(self, todo: list[Pending]) -> list[Outcome]:
        """Each voice's profile once, then the engine: one call over every voice where the
        engine is a `VoiceMixer`, else one call a voice."""
        voices: dict[tuple[str | None, str, str | None], list[Pending]] = {}
        for p in todo:
            voices.setdefault((p.request.tenant, p.request.voice_id, p.request.reference),
                              []).append(p)
        outcomes: dict[int, Outcome] = {}
        calls: list[list[tuple[Profile, Pending]]] = []
        for group in voices.values():
            profile = self._profile_for(group, outcomes)
            if profile is not None:
                calls.append([(profile, p) for p in group])
        if len(calls) > 1 and self.mixes_voices:
            calls = [[pair for call in calls for pair in call]]
        for call in calls:
            for (_, p), outcome in zip(call, self._run_engine(call), strict=True):
                outcomes[p.index] = outcome
        return [outcomes[p.index] for p in todo]

    def _profile_for(self, group: list[Pending], outcomes: dict[int, Outcome]) -> Profile | None:
        """The group's voice profile, or None with each of its outcomes set to the error."""
        t0 = time.perf_counter()
        first = group[0].request
        try:
            with self._device:
                profile = self._profiles.resolve(first.voice_id, first.reference,
                                                 tenant=first.tenant)
        except VoiceFactoryError as exc:
            for p in group:
                outcomes[p.index] = (exc if exc.retryable and not isinstance(exc, InvalidRequest)
                                     else self._reject(p, exc.code, exc.message))
            return None
        profile_ms = ms(time.perf_counter() - t0)
        for p in group:
            p.timings["profile"] = profile_ms
        return profile

    def _run_engine(self, call: list[tuple[Profile, Pending]]) -> list[Outcome]:
        batch: list[tuple[Profile, SynthesisItem]] = []
        spans: list[tuple[int, int]] = []
        for profile, p in call:
            assert p.prepared is not None
            start = len(batch)
            batch.extend((profile, SynthesisItem(text=sentence, language=p.prepared.language,
                                                 speed=p.request.speed,
                                                 instruct=p.request.instruct,
                                                 style=p.prepared.style))
                         for sentence in p.prepared.sentences)
            spans.append((start, len(batch)))
        t0 = time.perf_counter()
        try:
            with self._device:
                outputs = self._call_engine(batch)
        except EngineOutOfMemory as exc:
            if len(call) == 1:
                return [exc]
            self.oom_splits += 1
            self._on_oom_split()
            half = len(call) // 2
            return self._run_engine(call[:half]) + self._run_engine(call[half:])
        except VoiceFactoryError as exc:
            if len(call) > 1:  # find the item that fails, let the others through
                return [o for pair in call for o in self._run_engine([pair])]
            if exc.retryable:
                return [exc]
            return [self._reject(call[0][1], exc.code, exc.message)]
        engine_s = time.perf_counter() - t0
        if len(outputs) != len(batch):
            return [VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                      f"engine returned {len(outputs)} clips for "
                                      f"{len(batch)} sentences") for _ in call]
        audio_s = sum(o.audio.duration_s for o in outputs)
        rtf = round(engine_s / audio_s, 4) if audio_s else 0.0
        return [self._store_one(p, outputs[a:b], profile, ms(engine_s), rtf)
                for (profile, p), (a, b) in zip(call, spans, strict=True)]

    def _call_engine(self, batch: list[tuple[Profile, SynthesisItem]]) -> list[Synthesized]:
        """One engine call: synthesize() for one voice's items, synthesize_voices() for
        several (only a VoiceMixer is handed several: _synthesize_all)."""
        first = batch[0][0]
        if all(profile is first for profile, _ in batch):
            return self._engine.synthesize(first, [item for _, item in batch])
        assert isinstance(self._engine, VoiceMixer)
        return self._engine.synthesize_voices(batch)

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
            ref = self._store_clip(p, audio, pieces[0].language, profile.sha256)
        except VoiceFactoryError as exc:
            return exc
        if isinstance(ref, SynthesisResult):  # stored first by another writer
            return ref
        return self._answer(p, "succeeded", audio=ref, rtf=rtf, quality=quality)


def _shared(outcome: Outcome | None, request: SynthesisRequest, received: Received) -> Outcome:
    """A copy's answer: its leader's, with what the copy's own record carries."""
    assert outcome is not None
    if isinstance(outcome, VoiceFactoryError):
        return outcome
    return msgspec.structs.replace(outcome, job=request.job, metadata=request.metadata,
                                   attempt=received.attempt)
