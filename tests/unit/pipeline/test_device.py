"""DevicePlan without a GPU: the rules that refuse bad combinations, and OOM translation.
Runs only where torch is installed (the CosyVoice extra); CUDA paths run on a GPU host."""

from __future__ import annotations

import pytest

from pipeline.engines.base import EngineOutOfMemory
from pipeline.engines.device import DevicePlan, translate_oom


def test_out_of_memory_becomes_a_retry_smaller_error() -> None:
    translated = translate_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert isinstance(translated, EngineOutOfMemory)
    assert translated.retryable
    other = ValueError("shape mismatch")
    assert translate_oom(other) is other


def test_unknown_precision_is_refused_before_torch_loads() -> None:
    with pytest.raises(ValueError, match="VF_PRECISION must be one of fp32, fp16, bf16"):
        DevicePlan.resolve("cpu", "int4")


def test_cpu_plans() -> None:
    pytest.importorskip("torch")
    plan = DevicePlan.resolve("cpu", "fp32", empty_cache=True)
    with plan.inference():
        pass
    plan.after_batch()  # no CUDA: nothing to empty, must not fail
    with pytest.raises(ValueError, match="needs a GPU"):
        DevicePlan.resolve("cpu", "fp16")
