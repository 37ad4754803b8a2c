from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline import keys


def test_audio_key_layout() -> None:
    when = datetime(2026, 3, 7, 23, 59, tzinfo=UTC)
    assert keys.audio_key("req-1", "wav", when) == "audio/2026/03/07/req-1.wav"


@pytest.mark.parametrize("bad", ["../etc", "a/b", "a\x00b", "", "..", "a..b"])
def test_path_like_ids_never_reach_a_key(bad: str) -> None:
    with pytest.raises(ValueError):
        keys.voice_json_key(bad)
    with pytest.raises(ValueError):
        keys.audio_key(bad, "wav", datetime.now(UTC))


def test_voice_keys() -> None:
    assert keys.voice_json_key("alice") == "voices/alice/voice.json"
    assert keys.voice_reference_key("alice", "flac") == "voices/alice/reference.flac"


def test_a_jobs_first_version_keeps_its_keys_and_revisions_get_their_own_folder() -> None:
    assert keys.job_json_key("ep12") == keys.job_json_key("ep12", 1) == "jobs/ep12/job.json"
    assert keys.job_script_key("ep12", 2) == "jobs/ep12/v2/script.json"
    assert keys.job_vtt_key("ep12", 3) == "jobs/ep12/v3/subtitles.vtt"
    assert keys.job_track_key("ep12", "wav", 2) == "jobs/ep12/v2/track.wav"
    with pytest.raises(ValueError, match="version"):
        keys.job_json_key("ep12", 0)


def test_dlq_value_key_names_where_the_record_came_from_and_nothing_path_like() -> None:
    assert keys.dlq_value_key("t1.tts.requests", 7, 0) == "dlq/t1.tts.requests/7/0.bin"
    for topic in ("../x", "a/b", ""):
        with pytest.raises(ValueError):
            keys.dlq_value_key(topic, 0, 0)
    with pytest.raises(ValueError, match="must be >= 0"):
        keys.dlq_value_key("tts.requests", 0, -1)
