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
