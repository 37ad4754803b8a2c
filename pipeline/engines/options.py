"""What an engine needs to load, handed over by the process wiring (pipeline reads no settings).

`consumers.settings.Settings` -> `engine_options()` -> `EngineOptions` -> `create_engine`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineOptions:
    device: str = "cpu"  # "cpu", "cuda:0", "auto"
    precision: str = "fp32"  # fp32 | fp16 | bf16 (the last two on CUDA only)
    empty_cache: bool = False  # torch.cuda.empty_cache() after each batch
    cosyvoice_model_dir: str = ""  # local CosyVoice 2/3 weights; never downloaded
    # FunAudioLLM's CosyVoice source (a clone, or a folder with CosyVoice/ and Matcha-TTS/);
    # empty: it must already be importable from PYTHONPATH.
    cosyvoice_source: str = ""
