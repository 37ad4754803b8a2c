"""Object keys of DESIGN.md ("Objects"). IDs are re-checked here: nothing path-like reaches
a key even if a caller skipped request validation. Every key takes the owning `tenant`:
the `default` tenant's keys are DESIGN.md's, another tenant's are the same under
`tenants/{tenant}/` (topics/tenancy.py)."""

from __future__ import annotations

import re
from datetime import datetime

from topics.tenancy import tenant_root
from topics.validation import REQUEST_ID_MAX, VOICE_ID_MAX, check_id

_MONTH = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")


def audio_key(request_id: str, fmt: str, when: datetime, *, tenant: str | None = None) -> str:
    check_id("request_id", request_id, REQUEST_ID_MAX)
    return f"{tenant_root(tenant)}audio/{when:%Y/%m/%d}/{request_id}.{fmt}"


def audio_root(*, tenant: str | None = None) -> str:
    """Where a tenant's audio objects are (`audio/`, or under `tenants/{tenant}/`)."""
    return f"{tenant_root(tenant)}audio/"


def voice_prefix(voice_id: str, *, tenant: str | None = None) -> str:
    check_id("voice_id", voice_id, VOICE_ID_MAX)
    return f"{tenant_root(tenant)}voices/{voice_id}/"


def voices_root(*, tenant: str | None = None) -> str:
    """Where a tenant's voices are listed from (`voices/`, or under `tenants/{tenant}/`)."""
    return f"{tenant_root(tenant)}voices/"


def voice_reference_key(voice_id: str, ext: str, *, tenant: str | None = None) -> str:
    return voice_prefix(voice_id, tenant=tenant) + f"reference.{ext}"


def voice_json_key(voice_id: str, *, tenant: str | None = None) -> str:
    return voice_prefix(voice_id, tenant=tenant) + "voice.json"


def voice_consent_key(voice_id: str, ext: str, *, tenant: str | None = None) -> str:
    """The speaker's consent recording, kept with the voice (deleted with it)."""
    return voice_prefix(voice_id, tenant=tenant) + f"consent.{ext}"


def consent_prefix(consent_id: str, *, tenant: str | None = None) -> str:
    """A consent record not yet used by a voice (POST /v1/audio/voice_consents)."""
    check_id("consent_id", consent_id, VOICE_ID_MAX)
    return f"{tenant_root(tenant)}consents/{consent_id}/"


def profile_key(voice_id: str, sha256: str, engine: str, *, tenant: str | None = None) -> str:
    check_id("engine", engine, VOICE_ID_MAX)
    return voice_prefix(voice_id, tenant=tenant) + \
        f"profile-{sha256[:16]}-{engine}.safetensors"


def job_prefix(job_id: str, version: int = 1, *, tenant: str | None = None) -> str:
    """`jobs/{job_id}/` for a job's first version, `jobs/{job_id}/v{N}/` for revision N:
    a revision never overwrites an earlier version's objects."""
    check_id("job_id", job_id, REQUEST_ID_MAX)
    if version < 1:
        raise ValueError(f"job version must be >= 1, got {version}")
    root = f"{tenant_root(tenant)}jobs/{job_id}/"
    return root if version == 1 else f"{root}v{version}/"


def job_script_key(job_id: str, version: int = 1, *, tenant: str | None = None) -> str:
    """The job's manifest, written by `job run`: each line's text for the subtitles."""
    return job_prefix(job_id, version, tenant=tenant) + "script.json"


def job_json_key(job_id: str, version: int = 1, *, tenant: str | None = None) -> str:
    return job_prefix(job_id, version, tenant=tenant) + "job.json"


def job_subtitles_key(job_id: str, version: int = 1, *, tenant: str | None = None) -> str:
    return job_prefix(job_id, version, tenant=tenant) + "subtitles.srt"


def job_vtt_key(job_id: str, version: int = 1, *, tenant: str | None = None) -> str:
    return job_prefix(job_id, version, tenant=tenant) + "subtitles.vtt"


def job_track_key(job_id: str, fmt: str, version: int = 1, *,
                  tenant: str | None = None) -> str:
    return job_prefix(job_id, version, tenant=tenant) + f"track.{fmt}"


def usage_prefix(month: str, source: str, *, tenant: str | None = None) -> str:
    """A tenant's usage reports of one month (`YYYY-MM`) written by one aggregator group
    (`source`, its faust app ID: `{VF_TOPIC_PREFIX}vf-aggregator`, so deployments sharing a
    bucket keep apart), one object per results partition: the gateway sums what it lists."""
    check_month(month)
    check_id("usage source", source, 249)
    return f"{tenant_root(tenant)}usage/{month}/{source}/"


def usage_key(month: str, source: str, partition: int, *, tenant: str | None = None) -> str:
    """The report of one tts.results partition, written by the aggregator that owns it."""
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return usage_prefix(month, source, tenant=tenant) + f"p{partition:03d}.json"


def check_month(month: str) -> str:
    """A month as usage names it, `YYYY-MM` (UTC); anything else raises ValueError."""
    if not _MONTH.fullmatch(month):
        raise ValueError(f"month must be YYYY-MM (01..12), got {month!r}")
    return month


def dlq_value_key(topic: str, partition: int, offset: int) -> str:
    """Where a dead letter too big to carry inline keeps its original value bytes."""
    check_id("topic", topic, 249)  # Kafka's own limit on topic names
    if partition < 0 or offset < 0:
        raise ValueError(f"partition and offset must be >= 0, got {partition}, {offset}")
    return f"dlq/{topic}/{partition}/{offset}.bin"
