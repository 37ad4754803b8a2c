"""The command line's exit codes and messages as a user sees them (no servers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import voicefactory


def _tone(path: Path, seconds: float, rate: int = 22050) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate)
    return path


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        voicefactory.main(["nosuch"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_voices_check_names_the_broken_rule_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["voices", "check", str(_tone(tmp_path / "short.wav", 1.0))]) == 1
    captured = capsys.readouterr()
    assert "speech duration  FAIL  1.00 s after trimming silence" in captured.out
    assert "verdict: rejected" in captured.out
    assert "FAIL: reference too short: 1.0 s of speech, need >= 3.0 s" in captured.err
    assert voicefactory.main(["voices", "check", str(_tone(tmp_path / "ok.wav", 4.0))]) == 0


def test_dev_env_prints_exports(capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["dev", "env"]) == 0
    assert "export VF_KAFKA_BOOTSTRAP=127.0.0.1:9092" in capsys.readouterr().out
