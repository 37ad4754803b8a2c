"""What the job aggregator remembers per job, and the rules that merge results into it.

Flow: a `tts.result.v1` with `job: {id, index, total}` -> `merge` into the job's `JobState`
(the value of the aggregator's table, one per job ID, persisted in its changelog topic) ->
once `ready` (every index answered, or no result for the timeout) -> `build_job` with the
job's `JobManifest` (the script, for each line's text and the job's options) -> the
`tts.job.v1` event. After the event is out the state shrinks to an `emitted` marker that
keeps late duplicates from reopening the job.

Merging is idempotent and order-free, so redelivered and out-of-order results never double
or reorder a clip: a clip is keyed by its index; a succeeded clip is never replaced; a
failed, rejected, expired or cancelled one is replaced by any later answer for the same index.

Cancelled lines (a tts.control cancel of the job or of single lines, docs/lanes.md) are
answered `cancelled` by the workers, so they count as answered: a job cancelled wholesale
is complete, and closes, once its last line's `cancelled` result is merged, not at its
timeout. Its event keeps the job.v1 fields: each such clip has status `cancelled` and no
audio, and the job is `partial` if any line succeeded before the cancel, else `failed`.
`merge_result` also names what a result did (merged, duplicate, late, ...) for the
aggregator's metrics. Everything here is pure (no Kafka, no store) and unit-tested.
"""

from __future__ import annotations

import logging
from typing import Literal, NamedTuple

import msgspec

from pipeline.subtitles import lay_out
from topics.events import (
    AudioRef,
    ErrorInfo,
    JobClip,
    JobCompleted,
    JobStatus,
    Status,
    SynthesisResult,
)
from topics.validation import REQUEST_ID_MAX, check_id

log = logging.getLogger(__name__)

MANIFEST_SCHEMA = "vf.job-script.v1"
# Most lines a job may have. A closed job lists every index it never received (`missing`), so
# one stray result claiming total 2**62 would have the aggregator build that list when the
# job times out; a real script stays far below (its job.v1 event must fit one Kafka record).
MAX_JOB_TOTAL = 10_000
MAX_CLIP_SECONDS = 3600.0  # one line of <= 2,000 characters is minutes of speech at most


class ClipState(msgspec.Struct, omit_defaults=True, kw_only=True):
    request_id: str
    voice_id: str
    status: Status
    audio: AudioRef | None = None
    error: ErrorInfo | None = None
    text: str | None = None  # from the result's metadata.text, for producers without a script


class JobState(msgspec.Struct, omit_defaults=True, kw_only=True):
    job_id: str
    total: int
    first_seen: float  # wall-clock seconds (time.time()) of the first result
    last_seen: float  # ... of the latest result that changed or repeated a clip
    clips: dict[int, ClipState] = msgspec.field(default_factory=dict)
    emitted: bool = False
    emitted_at: float | None = None
    status: JobStatus | None = None  # of the emitted event

    @property
    def complete(self) -> bool:
        return len(self.clips) >= self.total


class ManifestLine(msgspec.Struct, omit_defaults=True, kw_only=True):
    index: int
    request_id: str
    voice_id: str
    text: str


class JobManifest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`jobs/{job_id}/script.json`: written by `job run` before it produces the requests."""

    job_id: str
    total: int
    lines: list[ManifestLine]
    created_at: str
    schema: str = MANIFEST_SCHEMA
    gap_ms: int | None = None  # None: the aggregator's VF_JOB_GAP_MS
    concat: bool = False
    track_format: Literal["wav", "flac", "mp3", "opus"] = "wav"


_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(JobState)
_manifest_decoder = msgspec.json.Decoder(JobManifest)


def encode_state(state: JobState) -> bytes:
    return _state_encoder.encode(state)


def decode_state(raw: bytes) -> JobState:
    return _state_decoder.decode(raw)


def encode_manifest(manifest: JobManifest) -> bytes:
    return _state_encoder.encode(manifest)


def decode_manifest(raw: bytes) -> JobManifest:
    return _manifest_decoder.decode(raw)


# What one result did to its job, for the aggregator's metrics (vf_job_results_total):
# merged: a new index; replaced: a failed/rejected/expired/cancelled clip answered again;
# duplicate: the index had succeeded already (kept); late: the job was already emitted;
# invalid: unusable job ID, index, total or audio duration; no_job: the result is not part
# of a job.
MergeOutcome = Literal["merged", "replaced", "duplicate", "late", "invalid", "no_job"]


class Merge(NamedTuple):
    state: JobState | None  # what to store; None: nothing worth keeping changed
    outcome: MergeOutcome


def merge(state: JobState | None, result: SynthesisResult, now: float) -> JobState | None:
    """The state after `result`, or None when the result changes nothing worth keeping
    (not part of a job, out of range, or late for a job already emitted)."""
    return merge_result(state, result, now).state


def merge_result(state: JobState | None, result: SynthesisResult, now: float) -> Merge:
    """`merge`, also saying what the result did (see `MergeOutcome`)."""
    job = result.job
    if job is None:
        return Merge(None, "no_job")
    ctx = {"request_id": result.request_id, "voice_id": result.voice_id}
    try:
        check_id("job.id", job.id, REQUEST_ID_MAX)  # it becomes part of object keys
    except ValueError as exc:
        log.warning("result with an unusable job ID ignored: %s", exc, extra=ctx)
        return Merge(None, "invalid")
    if job.total > MAX_JOB_TOTAL:
        log.warning("job %s: result says total %d, more than %d lines; ignored", job.id,
                    job.total, MAX_JOB_TOTAL, extra=ctx)
        return Merge(None, "invalid")
    if not 0 <= job.index < job.total:
        log.warning("job %s: result index %d outside 0..%d, ignored", job.id, job.index,
                    job.total - 1, extra=ctx)
        return Merge(None, "invalid")
    audio = result.audio
    if audio is not None and not 0.0 <= audio.duration_s <= MAX_CLIP_SECONDS:  # NaN too
        # The timeline and subtitles are laid out from it: a negative or infinite one made
        # every attempt to close the job fail, and the timer retried it forever.
        log.warning("job %s: index %d has audio of %r s, ignored", job.id, job.index,
                    audio.duration_s, extra=ctx)
        return Merge(None, "invalid")
    if state is None:
        state = JobState(job_id=job.id, total=job.total, first_seen=now, last_seen=now)
    elif state.emitted:
        log.debug("job %s: result for index %d after the job was emitted, ignored", job.id,
                 job.index, extra=ctx)
        return Merge(None, "late")
    elif job.total != state.total:
        # The first answer fixes the total; a disagreeing producer is a bug worth a warning,
        # not a reason to drop a clip that fits.
        log.warning("job %s: result says total %d, job has %d", job.id, job.total,
                    state.total, extra=ctx)
        if job.index >= state.total:
            return Merge(None, "invalid")
    clips = dict(state.clips)
    old = clips.get(job.index)
    if old is not None and old.status == "succeeded":
        if old.request_id != result.request_id:
            log.warning("job %s: index %d answered by %s and %s; keeping the first success",
                        job.id, job.index, old.request_id, result.request_id, extra=ctx)
        return Merge(msgspec.structs.replace(state, last_seen=now), "duplicate")
    text = (result.metadata or {}).get("text")
    clips[job.index] = ClipState(request_id=result.request_id, voice_id=result.voice_id,
                                 status=result.status, audio=result.audio, error=result.error,
                                 text=text if isinstance(text, str) else None)
    return Merge(msgspec.structs.replace(state, clips=clips, last_seen=now),
                 "merged" if old is None else "replaced")


def ready(state: JobState, now: float, timeout_s: float, not_before: float = 0.0) -> bool:
    """Whether the job should be closed now: complete, or silent for `timeout_s`.

    `not_before` is when this aggregator started: after a restart the results that arrived
    while it was down are still being read, so silence is counted from then at the earliest.
    """
    if state.emitted:
        return False
    if state.complete:
        return True
    return now - max(state.last_seen, not_before) >= timeout_s


def job_status(state: JobState) -> JobStatus:
    """succeeded: every line has audio; failed: none has (all cancelled included); else
    partial."""
    succeeded = sum(1 for c in state.clips.values() if c.status == "succeeded")
    if succeeded == state.total:
        return "succeeded"
    return "failed" if succeeded == 0 else "partial"


def clip_texts(state: JobState, manifest: JobManifest | None) -> dict[int, str]:
    """Each line's text: the script's where there is one, else the result's metadata.text."""
    texts = {i: c.text for i, c in state.clips.items() if c.text}
    if manifest is not None:
        texts.update({line.index: line.text for line in manifest.lines})
    return texts


def build_job(state: JobState, *, manifest: JobManifest | None, gap_ms: int,
              completed_at: str, subtitles: str | None = None,
              track: AudioRef | None = None) -> JobCompleted:
    """The job event: clips in index order; the timeline holds the clips that have audio,
    `gap_ms` apart (and says so in the event's `gap_ms`)."""
    texts = clip_texts(state, manifest)
    clips = [JobClip(index=i, request_id=c.request_id, voice_id=c.voice_id,
                     text=texts.get(i, ""), status=c.status,
                     duration_s=c.audio.duration_s if c.audio else 0.0,
                     audio=c.audio, error=c.error)
             for i, c in sorted(state.clips.items())]
    timeline = lay_out([(c.index, c.duration_s) for c in clips if c.audio is not None],
                       gap_ms / 1000)
    return JobCompleted(job_id=state.job_id, status=job_status(state), total=state.total,
                        clips=clips, timeline=timeline, completed_at=completed_at,
                        duration_s=timeline[-1].end_s if timeline else 0.0,
                        subtitles=subtitles, track=track, gap_ms=gap_ms,
                        missing=[i for i in range(state.total) if i not in state.clips])


def emitted_marker(state: JobState, status: JobStatus, now: float) -> JobState:
    """What the table keeps once the event is out: enough to ignore late duplicates."""
    return JobState(job_id=state.job_id, total=state.total, first_seen=state.first_seen,
                    last_seen=state.last_seen, emitted=True, emitted_at=now, status=status)
