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
