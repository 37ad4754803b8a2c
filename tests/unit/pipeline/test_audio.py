from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio import Audio, AudioDecodeError, decode, encode_wav, speech_seconds
from pipeline.encode import encode, resample, target_rate
from pipeline.reference import check_reference


def tone(seconds: float, rate: int = 22050, amplitude: float = 0.3, hz: float = 180.0) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate)


def test_wav_round_trip_keeps_rate_and_length() -> None:
    audio = tone(1.5)
    back = decode(encode_wav(audio))
    assert back.sample_rate == 22050
    assert abs(back.duration_s - 1.5) < 1e-3


def test_undecodable_bytes_raise_a_decode_error() -> None:
    with pytest.raises(AudioDecodeError, match="not decodable audio"):
        decode(b"definitely not audio")


def test_speech_seconds_ignores_silence() -> None:
    audio = Audio(np.concatenate([tone(1.0).samples, np.zeros(22050, np.float32)]), 22050)
    assert speech_seconds(audio) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus"])
def test_every_output_format_decodes_back(fmt: str) -> None:
    rate = target_rate(fmt, None, 22050)
    back = decode(encode(resample(tone(1.0), rate), fmt))
    assert back.sample_rate == rate
    assert back.duration_s == pytest.approx(1.0, abs=0.08)


def test_opus_falls_back_to_48k_and_requested_rates_are_honoured() -> None:
    assert target_rate("opus", None, 22050) == 48000
    assert target_rate("opus", 24000, 22050) == 24000
    assert target_rate("wav", 16000, 22050) == 16000
    assert resample(tone(1.0), 16000).samples.shape == (16000,)


def test_reference_of_one_second_is_rejected_with_the_measured_length() -> None:
    report = check_reference(encode_wav(tone(1.0)))
    assert not report.ok
    assert any(p.startswith("reference too short: 1.0 s of speech, need >= 3.0 s")
               for p in report.problems)


def test_reference_rules_each_name_what_broke() -> None:
    assert check_reference(encode_wav(tone(4.0))).ok
    low = check_reference(encode_wav(tone(4.0, rate=8000)))
    assert any("sample rate too low: 8000 Hz" in p for p in low.problems)
    silent = check_reference(encode_wav(Audio(np.zeros(22050 * 4, np.float32), 22050)))
    assert any("silent" in p for p in silent.problems)
    clipped = check_reference(encode_wav(tone(4.0, amplitude=1.5)))
    assert any("clipped" in p for p in clipped.problems)
    assert check_reference(b"junk").problems[0].startswith("reference undecodable")
