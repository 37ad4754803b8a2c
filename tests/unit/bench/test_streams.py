from bench.streams import AudioLog
from consumers.settings import Settings
from topics.chunks import chunk_headers


def _log() -> AudioLog:
    return AudioLog(Settings())


def test_first_audio_is_the_first_record_with_pcm_bytes() -> None:
    log = _log()
    log.note(b"r1", b"\x00\x00" * 6000,
             chunk_headers(seq=0, attempt="a1", sample_rate=24000, final=False), now=10.0)
    log.note(b"r1", b"\x00\x00" * 6000,
             chunk_headers(seq=1, attempt="a1", sample_rate=24000, final=False), now=10.2)
    log.note(b"r1", b"", chunk_headers(seq=2, attempt="a1", sample_rate=24000, final=True,
                                       status="succeeded"), now=10.3)
    assert log.first_audio() == {"r1": 10.0}
    seen = log.streams["r1"]
    assert (seen.chunks, seen.status, seen.final_at, seen.attempts) == (
        3, "succeeded", 10.3, {"a1"})
    assert seen.audio_seconds == 0.5  # 12,000 16-bit samples at 24 kHz


def test_a_final_record_without_audio_is_not_a_first_chunk() -> None:
    log = _log()
    log.note(b"r2", b"", chunk_headers(seq=0, attempt="a1", sample_rate=24000, final=True,
                                       status="failed", error="engine_error"), now=5.0)
    assert log.first_audio() == {}
    assert log.streams["r2"].status == "failed"


def test_records_without_chunk_headers_are_counted_not_fatal() -> None:
    log = _log()
    log.note(b"r3", b"\x01\x02", [("vf-seq", b"0")], now=1.0)
    log.note(None, b"\x01\x02",
             chunk_headers(seq=0, attempt="a", sample_rate=24000, final=False), now=1.0)
    assert log.invalid == 2 and log.streams == {}


def test_a_restarted_stream_shows_two_attempts() -> None:
    log = _log()
    for attempt, now in (("a1", 1.0), ("a2", 3.0)):
        log.note(b"r4", b"\x00\x00", chunk_headers(seq=0, attempt=attempt, sample_rate=24000,
                                                   final=False), now=now)
    assert log.streams["r4"].attempts == {"a1", "a2"}
    assert log.first_audio() == {"r4": 1.0}  # what the caller heard first
