"""Chunk records on tts.audio: headers written by the worker read back by any reader."""

from __future__ import annotations

import pytest

from topics.chunks import (
    REPLY_PARTITION,
    InvalidChunk,
    chunk_headers,
    read_chunk,
    reply_partition,
)


def test_a_chunk_reads_back_as_written() -> None:
    headers = chunk_headers(seq=3, attempt="2", sample_rate=24000, final=False)
    chunk = read_chunk(b"req-1", b"\x01\x00", headers)
    assert (chunk.request_id, chunk.seq, chunk.attempt, chunk.sample_rate) == ("req-1", 3, "2",
                                                                              24000)
    assert (chunk.encoding, chunk.final, chunk.data, chunk.status) == ("pcm_s16le", False,
                                                                      b"\x01\x00", None)


def test_the_final_record_carries_the_answer() -> None:
    headers = chunk_headers(seq=0, attempt="1", sample_rate=16000, final=True,
                            status="cancelled", error="cancelled")
    chunk = read_chunk(b"r", None, headers)
    assert (chunk.final, chunk.status, chunk.error, chunk.data) == (True, "cancelled",
                                                                    "cancelled", b"")


def test_a_record_without_chunk_headers_is_refused() -> None:
    with pytest.raises(InvalidChunk, match="vf-seq"):
        read_chunk(b"r", b"", [("vf-attempt", b"1")])
    with pytest.raises(InvalidChunk, match="integers"):
        read_chunk(b"r", b"", [("vf-seq", b"0"), ("vf-attempt", b"1"), ("vf-sample-rate", b"x"),
                               ("vf-encoding", b"e"), ("vf-final", b"0")])


@pytest.mark.parametrize(("headers", "expected"), [
    ([], None), ([(REPLY_PARTITION, b"7")], 7), ([(REPLY_PARTITION, b"-1")], None),
    ([(REPLY_PARTITION, b"x")], None)])
def test_reply_partition(headers: list[tuple[str, bytes]], expected: int | None) -> None:
    assert reply_partition(headers) == expected
