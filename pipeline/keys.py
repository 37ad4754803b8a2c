"""Object keys of DESIGN.md ("Objects"). IDs are re-checked here: nothing path-like reaches
a key even if a caller skipped request validation."""

from __future__ import annotations

from datetime import datetime

from topics.validation import REQUEST_ID_MAX, VOICE_ID_MAX, check_id


def audio_key(request_id: str, fmt: str, when: datetime) -> str:
    check_id("request_id", request_id, REQUEST_ID_MAX)
    return f"audio/{when:%Y/%m/%d}/{request_id}.{fmt}"


def voice_prefix(voice_id: str) -> str:
    check_id("voice_id", voice_id, VOICE_ID_MAX)
    return f"voices/{voice_id}/"


def voice_reference_key(voice_id: str, ext: str) -> str:
    return voice_prefix(voice_id) + f"reference.{ext}"


def voice_json_key(voice_id: str) -> str:
    return voice_prefix(voice_id) + "voice.json"


def profile_key(voice_id: str, sha256: str, engine: str) -> str:
    check_id("engine", engine, VOICE_ID_MAX)
    return voice_prefix(voice_id) + f"profile-{sha256[:16]}-{engine}.safetensors"


def job_prefix(job_id: str, version: int = 1) -> str:
    """`jobs/{job_id}/` for a job's first version, `jobs/{job_id}/v{N}/` for revision N:
    a revision never overwrites an earlier version's objects."""
    check_id("job_id", job_id, REQUEST_ID_MAX)
    if version < 1:
        raise ValueError(f"job version must be >= 1, got {version}")
    return f"jobs/{job_id}/" if version == 1 else f"jobs/{job_id}/v{version}/"


def job_script_key(job_id: str, version: int = 1) -> str:
    """The job's manifest, written by `job run`: each line's text for the subtitles."""
    return job_prefix(job_id, version) + "script.json"


def job_json_key(job_id: str, version: int = 1) -> str:
    return job_prefix(job_id, version) + "job.json"


def job_subtitles_key(job_id: str, version: int = 1) -> str:
    return job_prefix(job_id, version) + "subtitles.srt"


def job_vtt_key(job_id: str, version: int = 1) -> str:
    return job_prefix(job_id, version) + "subtitles.vtt"


def job_track_key(job_id: str, fmt: str, version: int = 1) -> str:
    return job_prefix(job_id, version) + f"track.{fmt}"


def dlq_value_key(topic: str, partition: int, offset: int) -> str:
    """Where a dead letter too big to carry inline keeps its original value bytes."""
    check_id("topic", topic, 249)  # Kafka's own limit on topic names
    if partition < 0 or offset < 0:
        raise ValueError(f"partition and offset must be >= 0, got {partition}, {offset}")
    return f"dlq/{topic}/{partition}/{offset}.bin"
