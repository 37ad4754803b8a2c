"""Start-up checks for the CosyVoice engine: model directory, package import, API version.

VF_COSYVOICE_MODEL_DIR -> `inspect_model_dir` (which generation, which files are missing)
-> `import_cosyvoice` (FunAudioLLM's repository from VF_COSYVOICE_SOURCE or PYTHONPATH, with
Matcha-TTS; upstream's import-time logging set-up undone, transformers' own stderr handler and
progress bars off so log lines stay JSON) -> `model_class` (the model class takes a zero-shot
speaker id everywhere the adapter uses one).
Each failure is an `EngineUnavailable` naming what is wrong and how to fix it, raised before
any weights are read. Nothing here downloads: CosyVoice's own constructors fall back to a
ModelScope download when the directory does not exist, so the adapter only ever hands them
a directory it has checked.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pipeline.engines.base import EngineUnavailable
from pipeline.engines.cosyvoice_runtime import restore_root_logger
from pipeline.engines.device import DevicePlan

INSTALL_HINT = ("git clone --recursive https://github.com/FunAudioLLM/CosyVoice, "
                "pip install 'voicefactory[cosyvoice]', and set VF_COSYVOICE_SOURCE to the "
                "clone (or put it and its third_party/Matcha-TTS on PYTHONPATH); "
                "docs/cosyvoice.md")

# Files every CosyVoice 2/3 directory holds (CosyVoice-BlankEN is the Qwen tokenizer and
# LLM config folder); llm.rl.pt, spk2info.pt and the jit/TensorRT exports are optional.
_COMMON_FILES = ("llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "CosyVoice-BlankEN")


@dataclass(frozen=True)
class ModelLayout:
    path: Path
    generation: int  # 2 or 3
    class_name: str  # in cosyvoice.cli.cosyvoice
    config: str  # the hyperpyyaml file that names the generation


# (generation, class, config), newest first: a directory is read as the first whose config
# exists.
_GENERATIONS = ((3, "CosyVoice3", "cosyvoice3.yaml"), (2, "CosyVoice2", "cosyvoice2.yaml"))
_TOKENIZERS = {2: "speech_tokenizer_v2.onnx", 3: "speech_tokenizer_v3.onnx"}


def required_files(generation: int) -> tuple[str, ...]:
    return (*_COMMON_FILES, _TOKENIZERS[generation])


def inspect_model_dir(model_dir: str) -> ModelLayout:
    """The generation and class of the model in `model_dir`, or why it cannot be loaded."""
    if not model_dir.strip():
        raise EngineUnavailable(
            "VF_COSYVOICE_MODEL_DIR is not set: point it at a local CosyVoice2-0.5B or "
            "Fun-CosyVoice3-0.5B directory (weights are never downloaded at run time; "
            "see docs/cosyvoice.md)")
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise EngineUnavailable(f"VF_COSYVOICE_MODEL_DIR={model_dir} does not exist or is "
                                "not a directory")
    found = next((g for g in _GENERATIONS if (path / g[2]).is_file()), None)
    if found is None:
        if (path / "cosyvoice.yaml").is_file():
            raise EngineUnavailable(
                f"{path} holds a CosyVoice 1 model (cosyvoice.yaml); this engine runs "
                "CosyVoice 2 or 3 (24 kHz, instruct2): use CosyVoice2-0.5B or "
                "Fun-CosyVoice3-0.5B")
        raise EngineUnavailable(f"{path} has neither cosyvoice3.yaml nor cosyvoice2.yaml: "
                                "it is not a CosyVoice 2/3 model directory")
    generation, class_name, config = found
    missing = [name for name in required_files(generation) if not (path / name).exists()]
    if missing:
        raise EngineUnavailable(f"{path} ({config}) lacks {', '.join(missing)}: "
                                "download the complete model directory (docs/cosyvoice.md)")
    return ModelLayout(path, generation, class_name, config)


def source_paths(source: str) -> list[Path]:
    """The folders to import CosyVoice and Matcha-TTS from, for a VF_COSYVOICE_SOURCE that is
    either a CosyVoice clone (Matcha-TTS in its third_party/) or a folder holding `CosyVoice/`
    and `Matcha-TTS/` side by side."""
    root = Path(source).expanduser()
    if (root / "cosyvoice" / "cli").is_dir():
        return [root, root / "third_party" / "Matcha-TTS"]
    if (root / "CosyVoice" / "cosyvoice" / "cli").is_dir():
        return [root / "CosyVoice", root / "Matcha-TTS"]
    raise EngineUnavailable(f"VF_COSYVOICE_SOURCE={source} holds neither a CosyVoice clone "
                            "(cosyvoice/cli/) nor CosyVoice/ and Matcha-TTS/ folders")


def import_cosyvoice(source: str = "") -> ModuleType:
    """`cosyvoice.cli.cosyvoice`, or a message saying which part of the install is missing.

    `source` (VF_COSYVOICE_SOURCE) puts an upstream checkout on sys.path; empty means it must
    already be importable (PYTHONPATH)."""
    if source.strip():
        for path in reversed(source_paths(source)):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        module = importlib.import_module("cosyvoice.cli.cosyvoice")
    except ModuleNotFoundError as exc:
        raise _missing(exc) from exc
    except ImportError as exc:
        raise EngineUnavailable(f"importing cosyvoice.cli.cosyvoice failed: {exc}") from exc
    finally:
        # cosyvoice.utils.file_utils calls logging.basicConfig(level=DEBUG) on import.
        restore_root_logger(handlers, level)
    _quiet_transformers()
    return module


def _missing(exc: ModuleNotFoundError) -> EngineUnavailable:
    missing = exc.name or ""
    if missing == "cosyvoice":
        return EngineUnavailable("the cosyvoice package is not importable (FunAudioLLM's "
                                 "CosyVoice is a repository, not a PyPI package; PyPI's "
                                 f"`cosyvoice` is an unrelated wrapper): {INSTALL_HINT}")
    if missing.startswith("cosyvoice."):
        return EngineUnavailable(f"a `cosyvoice` package is importable but has no "
                                 f"{missing}: it is not FunAudioLLM's CosyVoice; "
                                 f"{INSTALL_HINT}")
    if missing.split(".")[0] == "matcha":
        return EngineUnavailable(
            "CosyVoice imports `matcha` from its third_party/Matcha-TTS submodule: add "
            "<clone>/third_party/Matcha-TTS to PYTHONPATH or set VF_COSYVOICE_SOURCE (run "
            "`git submodule update --init` in the clone if that folder is empty)")
    return EngineUnavailable(f"CosyVoice is on the path but its dependency "
                             f"{missing.split('.')[0]!r} is missing: pip install "
                             "'voicefactory[cosyvoice]' (docs/cosyvoice.md)")


def _quiet_transformers() -> None:
    """transformers logs through its own stderr handler and draws progress bars when it loads
    the Qwen LLM; route its records to the root logger (JSON in the worker) instead."""
    try:
        hf_logging = importlib.import_module("transformers.utils.logging")
    except ImportError:
        return
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_logging.disable_progress_bar()


# The adapter feeds every call from the zero-shot speaker cache, so each of these methods must
# take `zero_shot_spk_id`; releases before early 2025 lacked it on cross_lingual/instruct2.
_SPEAKER_METHODS = ("inference_zero_shot", "inference_cross_lingual", "inference_instruct2")


def model_class(module: ModuleType, layout: ModelLayout) -> type:
    cls = getattr(module, layout.class_name, None)
    if not isinstance(cls, type):
        raise EngineUnavailable(f"the installed CosyVoice ({module.__file__}) has no "
                                f"{layout.class_name}, which {layout.path} "
                                f"({layout.config}) needs: update the clone (git pull)")
    for method in (*_SPEAKER_METHODS, "add_zero_shot_spk"):
        fn = getattr(cls, method, None)
        if fn is None:
            raise EngineUnavailable(f"the installed CosyVoice ({module.__file__}) has no "
                                    f"{layout.class_name}.{method}: update the clone")
        if method in _SPEAKER_METHODS and \
                "zero_shot_spk_id" not in inspect.signature(fn).parameters:
            raise EngineUnavailable(
                f"the installed CosyVoice ({module.__file__}) is too old: "
                f"{layout.class_name}.{method} takes no zero_shot_spk_id; update the clone "
                "(git pull) to a 2025 release or later")
    return cls


def device_plan(device: str, precision: str, *, empty_cache: bool) -> DevicePlan:
    """VF_DEVICE/VF_PRECISION as CosyVoice can honour them, or why not."""
    if precision == "bf16":
        raise EngineUnavailable("VF_PRECISION=bf16: CosyVoice runs in fp32 or fp16 "
                                "(its fp16 switch); use fp16 on a GPU")
    try:
        plan = DevicePlan.resolve(device, precision, empty_cache=empty_cache)
    except ValueError as exc:
        raise EngineUnavailable(str(exc)) from exc
    import torch

    # CosyVoice places its models itself: on the first visible GPU whenever CUDA is up.
    if plan.device.startswith("cuda") and plan.device not in ("cuda", "cuda:0"):
        raise EngineUnavailable(f"VF_DEVICE={plan.device}: CosyVoice always uses the first "
                                "visible GPU; pick the GPU with CUDA_VISIBLE_DEVICES and "
                                "set VF_DEVICE=cuda:0")
    if plan.device == "cpu" and torch.cuda.is_available():
        raise EngineUnavailable("VF_DEVICE=cpu, but CosyVoice puts its models on the GPU "
                                "whenever CUDA is visible; set VF_DEVICE=auto (or "
                                "cuda:0), or hide the GPUs with CUDA_VISIBLE_DEVICES=''")
    return plan
