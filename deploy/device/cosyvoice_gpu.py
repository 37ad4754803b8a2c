"""The CosyVoice engine's CUDA checks, for a GPU host or the device tool (not run by CI).

What CI cannot see on its CPU: tiny random-weight CosyVoice 2 and 3 folders
(tests/cosyvoice/tiny_models.py) -> CosyVoiceEngine on cuda:0 with VF_PRECISION=fp16 ->
  1. upstream's fp16 switch is on, the LLM runs under autocast in its own thread, CosyVoice
     2's HiFT (STFT/ISTFT) runs without autocast, and the audio is finite float32 at 24 kHz;
  2. the speech tokenizer's ONNX session uses CUDAExecutionProvider (needs onnxruntime-gpu;
     with plain onnxruntime it falls back to the CPU, reported as a failure);
  3. a real CUDA out-of-memory raised in upstream's LLM thread reaches the caller as
     EngineOutOfMemory, and the model's per-call state is cleaned up;
  4. a streamed request yields float32 chunks;
  5. a batch of three items (cosyvoice_batch and cosyvoice_flow: the LLM and the flow step
     them together in the caller's thread) gives finite float32 audio, its LLM steps under
     autocast.
Results: one JSON object on stdout and in $OUT/cosyvoice_gpu.json if OUT is set; exit 0 when
every check passed. `--device cpu` runs the same path in fp32 on a CPU (the OOM is then
raised by hand, the CUDA-only checks are skipped), to try the script itself.

Run: PYTHONPATH=. python deploy/device/cosyvoice_gpu.py --source <CosyVoice source>
(a clone, or a folder with CosyVoice/ and Matcha-TTS/; default VF_COSYVOICE_SOURCE).
On the device tool (its image has torch, transformers, onnx, tokenizers, tqdm, rich,
lightning; nothing can be fetched there): copy ../shared/third_party (2 MB) into a folder of
the checkout that .git/info/exclude ignores, e.g. .cosy/, and put there as wheels what the
image lacks: the cosyvoice extra's HyperPyYAML (+ ruamel.yaml), conformer, diffusers,
x-transformers (+ einx, frozendict, torch-einops-utils), wetext (+ kaldifst, contractions,
textsearch, anyascii, pyahocorasick), inflect (+ typeguard, more-itertools), omegaconf
(+ antlr4-python3-runtime), hydra-core, modelscope (+ modelscope-hub), gdown, wget,
openai-whisper (an sdist: `pip wheel --no-deps openai-whisper`), onnxruntime-gpu, and the
project's own soundfile, soxr, msgspec, orjson, pypinyin, num2words, cn2an. Then
`run(carry=[".cosy"], command="pip install --no-index --no-deps --target /tmp/site
.cosy/*.whl && PYTHONPATH=.:/tmp/site python3 deploy/device/cosyvoice_gpu.py --source
.cosy/third_party")`; the image has Python 3.12, so download cp312 wheels (also cryptography,
jaraco.functools, beautifulsoup4 + soupsieve, loguru, pysocks, cffi + pycparser, librosa +
audioread, pooch, decorator, platformdirs). Last run: docs/cosyvoice.md ("On a GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np


def _reference() -> Any:
    from pipeline.audio import Audio

    rate = 24000
    t = np.arange(4 * rate) / rate
    wave = np.sum([np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 6)], axis=0)
    return Audio(samples=(0.1 * wave).astype(np.float32), sample_rate=rate)


def _autocast_probe(module: Any, seen: list[tuple[str, bool]]) -> Any:
    import torch

    def hook(_module: Any, _inputs: Any) -> None:
        seen.append((threading.current_thread().name, torch.is_autocast_enabled("cuda")))

    return module.register_forward_pre_hook(hook)


def check_generation(generation: int, root: Path, source: str, device: str) -> dict[str, Any]:
    import torch

    from pipeline.engines.base import EngineOutOfMemory, SynthesisItem, VoiceMeasures
    from pipeline.engines.cosyvoice import CosyVoiceEngine
    from tests.cosyvoice.tiny_models import build_model_dir

    cuda = device.startswith("cuda")
    engine = CosyVoiceEngine(model_dir=str(build_model_dir(root, generation)), device=device,
                             precision="fp16" if cuda else "fp32", source=source)
    engine.load()
    model = engine._model
    profile = engine.profile(voice_id="gpu", sha256="ef" * 32, reference=_reference(),
                             prompt_text="希望你以后能够做的比我还好呦。",
                             measures=VoiceMeasures(np.zeros(256, np.float32)))
    llm_seen: list[tuple[str, bool]] = []
    hift_seen: list[tuple[str, bool]] = []
    body = model.model.llm.llm.model.model  # the Qwen2 body every decode step runs through
    hook = _autocast_probe(body, llm_seen)
    hift = model.model.hift
    vocode = hift.inference

    def probed_inference(*args: Any, **kwargs: Any) -> Any:  # token2wav calls .inference
        hift_seen.append((threading.current_thread().name, torch.is_autocast_enabled("cuda")))
        return vocode(*args, **kwargs)

    hift.inference = probed_inference
    item = SynthesisItem(text="今天天气很好，我们出去走走吧。", language="zh", speed=1.0)
    try:
        [out] = engine.synthesize(profile, [item])
    finally:
        hook.remove()
        hift.inference = vocode
    samples = out.audio.samples
    result: dict[str, Any] = {
        "fp16_switch": bool(model.model.fp16),
        "audio_ok": bool(samples.dtype == np.float32 and np.isfinite(samples).all()
                         and out.audio.sample_rate == 24000 and len(samples) > 0),
        "llm_thread_autocast": sorted({on for name, on in llm_seen
                                       if name != threading.current_thread().name}),
        "hift_autocast": sorted({on for _, on in hift_seen}),
        "hift_dtype": str(next(model.model.hift.parameters()).dtype),
        "providers": model.frontend.speech_tokenizer_session.get_providers(),
    }
    chunks = list(engine.synthesize_stream(profile, item))
    result["stream_ok"] = bool(chunks) and all(c.samples.dtype == np.float32
                                                and c.sample_rate == 24000 for c in chunks)
    batch_seen: list[tuple[str, bool]] = []
    hook = _autocast_probe(body, batch_seen)
    other = SynthesisItem(text="Nice to meet you.", language="en", speed=1.0)
    try:  # the batched decode runs in the caller's thread, under upstream's fp16 switch
        outs = engine.synthesize(profile, [item, other, item])
    finally:
        hook.remove()
    result["batch_ok"] = len(outs) == 3 and all(
        o.audio.samples.dtype == np.float32 and np.isfinite(o.audio.samples).all()
        and len(o.audio.samples) > 0 for o in outs)
    result["batch_autocast"] = sorted({on for _, on in batch_seen})

    def exhaust_memory(**kwargs: Any) -> Any:
        if cuda:  # a real allocation failure on the device, inside upstream's LLM thread
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        raise torch.OutOfMemoryError("CUDA out of memory (raised by hand on the CPU)")
        yield  # a generator, as upstream's llm.inference is

    inference = model.model.llm.inference
    model.model.llm.inference = exhaust_memory
    try:
        engine.synthesize(profile, [item])
        result["llm_oom"] = "no error"
    except EngineOutOfMemory as exc:
        result["llm_oom"] = f"EngineOutOfMemory: {exc.message[:120]}"
    except Exception as exc:
        result["llm_oom"] = f"{type(exc).__name__}: {exc}"
    finally:
        model.model.llm.inference = inference
    result["state_clean"] = not model.model.tts_speech_token_dict
    checks = {
        "audio": result["audio_ok"],
        "stream": result["stream_ok"],
        "batch": result["batch_ok"],
        "llm_oom": result["llm_oom"].startswith("EngineOutOfMemory"),
        "state_clean": result["state_clean"],
    }
    if cuda:
        checks |= {
            "fp16_switch": result["fp16_switch"],
            "llm_thread_autocast": result["llm_thread_autocast"] == [True],
            "batch_autocast": result["batch_autocast"] == [True],
            "hift_fp32": result["hift_dtype"] == "torch.float32",
            "onnx_cuda": "CUDAExecutionProvider" in result["providers"],
        }
        if generation == 2:  # CosyVoice 3's token2wav autocasts its HiFT itself
            checks["hift_not_autocast"] = result["hift_autocast"] == [False]
    result["checks"] = checks
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.environ.get("VF_COSYVOICE_SOURCE", ""))
    parser.add_argument("--device", default="cuda:0", choices=("cuda:0", "cpu"))
    args = parser.parse_args()
    import torch

    report: dict[str, Any] = {"torch": torch.__version__,
                              "cuda": torch.cuda.is_available(), "device": args.device}
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        report["error"] = "CUDA is not available here"
    else:
        from pipeline.engines.cosyvoice_setup import import_cosyvoice

        import_cosyvoice(args.source)  # the tiny folders' yaml names upstream's classes
        with tempfile.TemporaryDirectory(prefix="vf-cosyvoice-gpu-") as tmp:
            for generation in (2, 3):
                try:
                    report[f"v{generation}"] = check_generation(generation, Path(tmp),
                                                                args.source, args.device)
                except Exception as exc:
                    report[f"v{generation}"] = {"error": f"{type(exc).__name__}: {exc}"}
    passed = "error" not in report and all(
        "error" not in report[f"v{g}"] and all(report[f"v{g}"]["checks"].values())
        for g in (2, 3))
    report["passed"] = passed
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "cosyvoice_gpu.json").write_text(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
