"""Closing a job: subtitles (and the track) into the store, then exactly one `tts.job.v1`.

Flow of `JobEmitter.emit(state)`:

    1. jobs/{id}/job.json exists with an outbox note (partition, offset)?
         -> scan tts.jobs from that offset for the job's key; found: already out, stop
    2. read jobs/{id}/script.json (texts, gap, concat; absent: metadata.text, VF_JOB_GAP_MS)
    3. put jobs/{id}/subtitles.srt and its WebVTT twin subtitles.vtt (both presigned into
       the event, as clips are); with concat, assemble and put jobs/{id}/track.{fmt}
    4. note the end offset of the job's tts.jobs partition, put job.json with that note
    5. produce the event to that partition and wait for acks=all; an event over
       EVENT_INLINE_MAX (a long script: about 900 bytes a line) goes out without its clips
       and timeline, naming job.json (the whole event) instead: a record the broker refuses
       for its size would otherwise be retried every tick, and the job never close

Version N >= 2 of a job (a revision) writes the same objects under jobs/{id}/v{N}/ and
its event says `version`; clips carried over from an earlier version get a fresh presigned
URL. The caller then marks the job emitted in its table. A crash anywhere before step 4 leaves
no note, so the retry produces the event; a crash after step 4 leaves a note that step 1
resolves by reading the topic itself, so the event is not produced twice even when the
crash came between the broker's ack and the table's `emitted` mark. Store calls are
blocking (minio SDK) and run in a thread so that the consumer keeps its heartbeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import UTC, datetime

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from consumers.aggregator.state import (
    JobManifest,
    JobState,
    build_job,
    clip_texts,
    decode_manifest,
)
from consumers.kafka import PRODUCER_MAX_REQUEST_BYTES, make_consumer
from consumers.settings import Settings
from pipeline.assembly import assemble
from pipeline.audio import decode
from pipeline.encode import CONTENT_TYPES, encode
from pipeline.keys import (
    job_json_key,
    job_script_key,
    job_subtitles_key,
    job_track_key,
    job_vtt_key,
)
from pipeline.storage import ObjectStore
from pipeline.subtitles import cues, render_srt, render_vtt
from topics.events import AudioRef, JobClip, JobCompleted, decode_job
from topics.events import encode as encode_event
from topics.partitioning import partition_for
from topics.specs import JOBS
from topics.tenancy import tenant_of

log = logging.getLogger(__name__)

# What a job event may weigh on tts.jobs: the producer's request limit less room for the
# batch, its headers and a topic whose max.message.bytes is the broker's 1 MiB default.
EVENT_INLINE_MAX = PRODUCER_MAX_REQUEST_BYTES - 128 * 1024

OUTBOX_PARTITION = "vf-jobs-partition"
OUTBOX_OFFSET = "vf-jobs-offset"


class JobEmitter:
    def __init__(self, *, settings: Settings, store: ObjectStore, producer: AIOKafkaProducer,
                 jobs_topic: str) -> None:
        self._settings = settings
        self._store = store
        self._producer = producer
        self._topic = jobs_topic
        self._partitions = JOBS.partitions
        # One reader for end offsets and outbox scans; emits are serialised by the caller.
        self._reader: AIOKafkaConsumer = make_consumer(
            settings.kafka, enable_auto_commit=False, group_id=None)

    async def start(self) -> None:
        await self._producer.start()
        await self._reader.start()
        # Partition by the topic's real count: a job's event and its outbox note must agree.
        found = await self._producer.partitions_for(self._topic)
        if not found:
            raise RuntimeError(f"topic {self._topic} has no partitions; run `voicefactory "
                               "topics create`")
        self._partitions = len(found)

    async def stop(self) -> None:
        await self._reader.stop()
        await self._producer.stop()

    async def emit(self, state: JobState) -> tuple[JobCompleted, bool]:
        """The job's event (whole, as job.json has it) and whether this call produced it
        (False: it already was; then the event as read back from tts.jobs)."""
        job_id = state.job_id
        partition = partition_for(job_id, self._partitions)
        earlier = await self._already_emitted(job_id, state.version, partition, state.tenant)
        if earlier is not None:
            log.warning("job %s was already on %s[%d]; not producing it again", job_id,
                        self._topic, partition, extra={"topic": self._topic,
                                                       "partition": partition})
            return earlier, False
        event = await asyncio.to_thread(self._write_artifacts, state)
        value = encode_event(event)
        offset = await self._end_offset(partition)
        await asyncio.to_thread(self._store.put,
                                job_json_key(job_id, state.version, tenant=state.tenant), value,
                                "application/json",
                                {OUTBOX_PARTITION: str(partition), OUTBOX_OFFSET: str(offset)})
        if len(value) > EVENT_INLINE_MAX:
            value = encode_event(await asyncio.to_thread(self._by_reference, event, len(value)))
        await self._producer.send_and_wait(self._topic, value, key=job_id.encode(),
                                           partition=partition)
        log.info("job %s v%d %s: %d/%d clips, %d cancelled, %d carried, %.2f s", job_id,
                 state.version, event.status,
                 sum(1 for c in event.clips if c.status == "succeeded"), event.total,
                 sum(1 for c in event.clips if c.status == "cancelled"),
                 sum(1 for c in event.clips if (c.version or 1) < state.version),
                 event.duration_s,
                 extra={"topic": self._topic, "partition": partition})
        return event, True

    def _write_artifacts(self, state: JobState) -> JobCompleted:
        manifest = self._manifest(state.job_id, state.version, state.tenant)
        gap_ms = manifest.gap_ms if manifest and manifest.gap_ms is not None else \
            self._settings.aggregator.job_gap_ms
        completed_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
        draft = build_job(state, manifest=manifest, gap_ms=gap_ms, completed_at=completed_at)
        draft = msgspec.structs.replace(draft, clips=[self._fresh_url(c, state.version)
                                                      for c in draft.clips])
        made = cues(draft.timeline, clip_texts(state, manifest))
        version = state.version
        srt_key = job_subtitles_key(state.job_id, version, tenant=state.tenant)
        vtt_key = job_vtt_key(state.job_id, version, tenant=state.tenant)
        self._store.put(srt_key, render_srt(made).encode(), "application/x-subrip")
        self._store.put(vtt_key, render_vtt(made).encode(), "text/vtt")
        track = None
        if manifest is not None and manifest.concat and draft.timeline:
            track = self._write_track(draft, manifest, version)
        ttl = self._settings.store.presign_seconds
        bucket = self._store.bucket
        return msgspec.structs.replace(
            draft, subtitles=f"s3://{bucket}/{srt_key}",
            subtitles_url=self._store.presign(srt_key, ttl),
            subtitles_vtt=f"s3://{bucket}/{vtt_key}",
            subtitles_vtt_url=self._store.presign(vtt_key, ttl), track=track)

    def _by_reference(self, event: JobCompleted, size: int) -> JobCompleted:
        """The event without its clips and timeline, pointing at the stored job.json that has
        them (written in step 4, before this record)."""
        key = job_json_key(event.job_id, event.version or 1, tenant=event.tenant)
        log.warning("job %s: its event is %d bytes, over the %d a record carries; clips and "
                    "timeline are in %s", event.job_id, size, EVENT_INLINE_MAX, key)
        return msgspec.structs.replace(
            event, clips=[], timeline=[], omitted=["clips", "timeline"],
            job_json=f"s3://{self._store.bucket}/{key}",
            job_json_url=self._store.presign(key, self._settings.store.presign_seconds))

    def _fresh_url(self, clip: JobClip, version: int) -> JobClip:
        """A clip carried over from an earlier version, its URL presigned again (the old
        one may be close to expiry); this version's own clips are left as the worker made
        them."""
        if clip.audio is None or (clip.version or 1) >= version:
            return clip
        url = self._store.presign(clip.audio.key, self._settings.store.presign_seconds)
        return msgspec.structs.replace(clip, audio=msgspec.structs.replace(clip.audio, url=url))

    def _manifest(self, job_id: str, version: int, tenant: str | None) -> JobManifest | None:
        key = job_script_key(job_id, version, tenant=tenant)
        raw = self._store.get(key)
        if raw is None:
            return None
        try:
            manifest = decode_manifest(raw)
        except msgspec.ValidationError as exc:
            log.warning("job %s: %s is unreadable (%s); using results' metadata only", job_id,
                        key, exc)
            return None
        return manifest if manifest.job_id == job_id and manifest.version == version else None

    def _write_track(self, draft: JobCompleted, manifest: JobManifest,
                     version: int) -> AudioRef:
        by_index = {c.index: c for c in draft.clips}
        placed = []
        for span in draft.timeline:
            ref = by_index[span.index].audio
            assert ref is not None  # the timeline only holds clips with audio
            data = self._store.get(ref.key)
            if data is None:
                raise FileNotFoundError(f"job {draft.job_id}: clip {span.index} object "
                                        f"{ref.key} is gone")
            placed.append((span, decode(data)))
        audio = assemble(placed)
        fmt = manifest.track_format
        data = encode(audio, fmt)
        key = job_track_key(draft.job_id, fmt, version, tenant=draft.tenant)
        self._store.put(key, data, CONTENT_TYPES[fmt])
        return AudioRef(bucket=self._store.bucket, key=key,
                        url=self._store.presign(key, self._settings.store.presign_seconds),
                        format=fmt, sample_rate=audio.sample_rate,
                        duration_s=round(audio.duration_s, 3), bytes=len(data),
                        sha256=hashlib.sha256(data).hexdigest())

    async def _already_emitted(self, job_id: str, version: int, partition: int,
                               tenant: str | None) -> JobCompleted | None:
        """The version's event if an earlier attempt produced it (its outbox note says
        where)."""
        info = await asyncio.to_thread(self._store.stat,
                                       job_json_key(job_id, version, tenant=tenant))
        if info is None or OUTBOX_OFFSET not in info.metadata:
            return None
        noted = int(info.metadata.get(OUTBOX_PARTITION, partition))
        return await self._scan(job_id, version, noted, int(info.metadata[OUTBOX_OFFSET]),
                                tenant)

    async def _scan(self, job_id: str, version: int, partition: int,
                    offset: int, tenant: str | None) -> JobCompleted | None:
        tp = TopicPartition(self._topic, partition)
        end = (await self._reader.end_offsets([tp]))[tp]
        if offset >= end:
            return None
        self._reader.assign([tp])
        self._reader.seek(tp, offset)
        key = job_id.encode()
        deadline = time.monotonic() + 30
        while await self._reader.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {self._topic}[{partition}] from {offset} to "
                                   f"{end} took over 30 s")
            for records in (await self._reader.getmany(tp, timeout_ms=500)).values():
                for rec in records:
                    if rec.key == key and rec.value is not None:
                        event = decode_job(bytes(rec.value))
                        # tts.jobs is keyed by the bare job ID: another tenant's job of
                        # the same ID shares the key, not the tenant.
                        if (event.version or 1) == version and \
                                tenant_of(event.tenant) == tenant_of(tenant):
                            return event
        return None

    async def _end_offset(self, partition: int) -> int:
        tp = TopicPartition(self._topic, partition)
        return int((await self._reader.end_offsets([tp]))[tp])
