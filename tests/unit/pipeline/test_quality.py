"""Quality warnings on one output: clipping, level, duration against the text."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio import Audio
from pipeline.quality import warnings_for


def _warnings(samples: np.ndarray, *, before: float = -20.0, after: float = -16.0) -> list[str]:
    return warnings_for(Audio(samples.astype(np.float32), 24000), text="hello there friend",
                        loudness_before=before, loudness_after=after, target_lufs=-16.0,
                        speaking_rate=None, speed=1.0)


def test_clipping_is_named_above_a_tenth_of_a_percent_of_samples_at_full_scale() -> None:
    samples = 0.3 * np.sin(np.arange(24000) / 5)
    assert _warnings(samples) == []
    samples[:100] = 1.0  # 0.42 % of the samples
    samples[100:200] = -1.0
    [warning] = _warnings(samples)
    assert warning.startswith("clipping: 0.83%")
    samples[:200] = 0.3
    samples[:10] = -1.0  # 0.04 %: under the threshold
    assert _warnings(samples) == []


def test_silence_and_quiet_output_are_named() -> None:
    quiet = 0.001 * np.sin(np.arange(24000) / 5)
    assert _warnings(quiet, before=float("-inf"))[0].startswith("silent")
    assert _warnings(quiet, before=-60.0)[0].startswith("too quiet: engine output")
    assert _warnings(quiet, before=-30.0, after=-25.0)[0].startswith("too quiet: -25.0")


def test_an_empty_clip_warns_without_failing() -> None:
    assert _warnings(np.zeros(0), before=float("-inf")) == [
        "silent: the engine returned no signal"]


def test_the_result_reports_the_delivered_loudness_and_the_engines_under_its_own_name() -> None:
    from pipeline.loudness import loudness_lufs, normalize_loudness
    from pipeline.quality import assess

    raw = Audio((0.02 * np.sin(np.arange(48000) / 7)).astype(np.float32), 24000)
    final, before, after = normalize_loudness(raw, -16.0)
    quality = assess(raw, final, text="hello there friend", reference_embedding=None,
                     encoder=None, loudness_before=before, loudness_after=after,
                     target_lufs=-16.0, speaking_rate=None, speed=1.0)
    assert quality.loudness_input_lufs is not None and quality.loudness_lufs is not None
    # What a meter reads on each: the delivered file sits at the target, the engine's below.
    assert quality.loudness_lufs == pytest.approx(loudness_lufs(final), abs=0.5)
    assert quality.loudness_lufs == pytest.approx(-16.0, abs=0.5)
    assert quality.loudness_input_lufs == pytest.approx(loudness_lufs(raw), abs=0.5)
    assert quality.loudness_input_lufs < -25.0
