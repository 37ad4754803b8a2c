"""Shared fixtures for pipeline tests: real speech from espeak-ng and one speaker encoder."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest

from pipeline.audio import decode
from pipeline.speaker import SpeakerEncoder

SENTENCE = ("The quick brown fox jumps over the lazy dog, and then it runs far away "
            "across the quiet green hills.")


def espeak_wav(text: str = SENTENCE, *, pitch: int = 50, voice: str = "en-us") -> bytes:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng missing")
    return subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "--stdout", text],
                          capture_output=True, check=True).stdout


@pytest.fixture(scope="session")
def encoder() -> SpeakerEncoder:
    enc = SpeakerEncoder()
    enc.load()
    return enc


@pytest.fixture
def speech() -> Callable[..., bytes]:
    return espeak_wav


__all__ = ["SENTENCE", "decode", "espeak_wav"]
