"""Quality warnings on one output: clipping, level, duration against the text."""

from __future__ import annotations

import numpy as np

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
