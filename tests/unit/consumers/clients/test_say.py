"""say --stream's reader (consumers/clients/say.py) over a fake consumer: attempts, the
growing WAV file, the final record's status."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from consumers.clients.say import PcmFile, _follow
from topics.chunks import chunk_headers


@dataclass
class Rec:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


@dataclass
class FakeConsumer:
    batches: list[list[Rec]] = field(default_factory=list)

    async def getmany(self, timeout_ms: int = 0) -> dict[str, list[Rec]]:
        return {"tp": self.batches.pop(0)} if self.batches else {}


def rec(seq: int, attempt: str, data: bytes = b"", *, final: bool = False,
        status: str | None = None, error: str | None = None, key: bytes = b"r1") -> Rec:
    return Rec(key, data, chunk_headers(seq=seq, attempt=attempt, sample_rate=16000,
                                        final=final, status=status, error=error))


def pcm(*values: int) -> bytes:
    return np.array(values, "<i2").tobytes()


async def test_a_new_attempt_restarts_the_output_and_the_final_ends_it(tmp_path: Path) -> None:
    out = tmp_path / "x.wav"
    consumer = FakeConsumer([
        [rec(0, "1-aaaa", pcm(1, 2, 3)), rec(0, "1-other", pcm(9), key=b"r2"),
         rec(1, "1-aaaa", pcm(4))],
        [rec(0, "1-bbbb", pcm(5, 6)), rec(1, "1-bbbb", pcm(7))],
        [rec(2, "1-bbbb", final=True, status="succeeded")],
    ])
    log, output = io.StringIO(), PcmFile(out)
    report = await _follow(consumer, "r1", output, 0.0, float("inf"), log)
    output.close()
    assert report.status == "succeeded" and report.attempts == ["1-aaaa", "1-bbbb"]
    assert report.chunks == 2 and report.seconds == pytest.approx(3 / 16000)
    assert "started over" in log.getvalue() and "first chunk after" in log.getvalue()
    samples, rate = sf.read(out, dtype="int16")
    assert rate == 16000 and list(samples) == [5, 6, 7]


async def test_a_failed_stream_reports_its_status_and_code(tmp_path: Path) -> None:
    out = tmp_path / "x.raw"
    consumer = FakeConsumer([[rec(0, "2-cccc", pcm(1)),
                              rec(1, "2-cccc", final=True, status="cancelled",
                                  error="cancelled")]])
    output = PcmFile(out)
    report = await _follow(consumer, "r1", output, 0.0, float("inf"), io.StringIO())
    output.close()
    assert (report.status, report.error) == ("cancelled", "cancelled")
    assert out.read_bytes() == pcm(1)  # .raw: bare PCM, no header


async def test_no_final_record_times_out(tmp_path: Path) -> None:
    consumer: Any = FakeConsumer([[rec(0, "1-aaaa", pcm(1))]])
    with pytest.raises(TimeoutError, match="no final audio record for r1"):
        await _follow(consumer, "r1", PcmFile(tmp_path / "x.wav"), 0.0, 0.0, io.StringIO())
