"""Device and precision handling for torch engines (CosyVoice), torch imported lazily.

`EngineOptions` (`VF_DEVICE`, `VF_PRECISION`, `VF_EMPTY_CACHE`) -> `DevicePlan` at engine load ->
`plan.inference()` around every batch (torch.inference_mode, autocast for fp16/bf16 on CUDA
unless the engine asks for none)
-> `plan.after_batch()` (optional `torch.cuda.empty_cache()`). Out-of-memory errors from
torch become `EngineOutOfMemory`, which the processor answers by splitting the batch.
The espeak and bench engines need none of this, so torch is never imported for them.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.engines.base import EngineOutOfMemory, EngineUnavailable

PRECISIONS = ("fp32", "fp16", "bf16")


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise EngineUnavailable("this engine needs torch: pip install torch "
                                "(the CUDA wheels also run on the CPU)") from exc


@dataclass(frozen=True)
class DevicePlan:
    device: str  # "cpu", "cuda:0", ...
    precision: str
    empty_cache: bool

    @classmethod
    def resolve(cls, device: str, precision: str, *, empty_cache: bool = False) -> DevicePlan:
        """`device` "auto" picks cuda:0 when CUDA is usable; fp16/bf16 need a GPU."""
        if precision not in PRECISIONS:
            raise ValueError(f"VF_PRECISION must be one of {', '.join(PRECISIONS)}, "
                             f"got {precision!r}")
        torch = _torch()
        if device in ("auto", ""):
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineUnavailable(f"VF_DEVICE={device} but CUDA is not available here "
                                    "(check CUDA_VISIBLE_DEVICES and the driver)")
        if device == "cpu" and precision != "fp32":
            # Half precision on CPU is slow or unsupported for most kernels: refuse loudly.
            raise ValueError(f"VF_PRECISION={precision} needs a GPU; use fp32 on the CPU")
        if precision == "bf16" and device.startswith("cuda") and \
                not torch.cuda.is_bf16_supported():
            raise ValueError("VF_PRECISION=bf16 is not supported by this GPU; use fp16")
        return cls(device=device, precision=precision, empty_cache=empty_cache)

    @property
    def dtype(self) -> Any:
        torch = _torch()
        return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
            self.precision]

    @contextlib.contextmanager
    def inference(self, *, autocast: bool = True) -> Iterator[None]:
        """torch.inference_mode, and autocast to the plan's dtype on CUDA unless the engine
        casts itself (`autocast=False`: CosyVoice). Both are per thread: work an engine runs
        in threads of its own is not covered."""
        torch = _torch()
        with torch.inference_mode():
            if not autocast or self.precision == "fp32" or not self.device.startswith("cuda"):
                yield
                return
            with torch.autocast(device_type="cuda", dtype=self.dtype):
                yield

    def after_batch(self) -> None:
        if self.empty_cache and self.device.startswith("cuda"):
            _torch().cuda.empty_cache()


def translate_oom(exc: BaseException) -> BaseException:
    """torch's OutOfMemoryError (or a RuntimeError saying so) -> EngineOutOfMemory."""
    name = type(exc).__name__
    if name == "OutOfMemoryError" or (isinstance(exc, RuntimeError) and
                                      "out of memory" in str(exc).lower()):
        return EngineOutOfMemory(f"device out of memory: {str(exc).splitlines()[0][:200]}")
    return exc
