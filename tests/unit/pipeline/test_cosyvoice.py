"""The CosyVoice adapter against a recording fake of FunAudioLLM's `cosyvoice` package.

These tests check our side of the API call by call, fast and without upstream's source: the
fake mirrors the signatures and frontend behaviour of the current upstream classes
(CosyVoice2, CosyVoice3, their `model.tts` entry point; a frontend that copies a cached
speaker before deleting keys from it, as upstream does since 3b44913), and records every
call. The start-up errors are checked with their exact messages. tests/cosyvoice drives the
same adapter through upstream's real code with tiny random-weight models.
"""

from __future__ import annotations

import re
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.numpy import load_file, save_file

from pipeline.audio import Audio
from pipeline.engines import EngineOptions, create_engine
from pipeline.engines.base import (
    EngineOutOfMemory,
    EngineUnavailable,
    Profile,
    StyleHints,
    SynthesisItem,
    VoiceMeasures,
)
from pipeline.engines.cosyvoice import PROFILE_TENSORS, CosyVoiceEngine, speaker_id
from pipeline.engines.cosyvoice_prompts import plan_call
from pipeline.engines.cosyvoice_setup import required_files
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError

RATE = 24000
MEASURES = VoiceMeasures(np.zeros(256, np.float32))
SHA = "ab" * 32
TRANSCRIPT = "希望你以后能够做的比我还好呦。"
V3_PREFIX = "You are a helpful assistant.<|endofprompt|>"


# -- the fake package ---------------------------------------------------------------------


def _tokens(text: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[ord(ch) for ch in text]], dtype=torch.int32)
    return ids, torch.tensor([ids.shape[1]], dtype=torch.int32)


class FakeFrontend:
    """Upstream CosyVoiceFrontEnd's behaviour where the adapter depends on it."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log
        self.spk2info: dict[str, Any] = {}
        self.device = torch.device("cpu")
        self.computed = 0  # prompt features computed from audio

    def text_normalize(self, text: str, split: bool = True,
                       text_frontend: bool = True) -> str | list[str]:
        self.log.append(("text_normalize", text))
        if not text_frontend or ("<|" in text and "|>" in text):  # left alone, as upstream
            return [text] if split else text
        out = text.replace("2", "二")  # a visible normalisation
        return [s.strip() for s in re.findall(r"[^。.!?]+[。.!?]?", out) if s.strip()] \
            if split else out

    def _extract_text_token(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        return _tokens(text)

    def _from_wav(self, prompt_text: str, prompt_wav: Any) -> dict[str, Any]:
        self.computed += 1
        if isinstance(prompt_wav, torch.Tensor):  # the pre-2025 frontend: 16-kHz tensor
            samples, rate = prompt_wav.numpy().reshape(-1), 16000
        else:
            samples, rate = sf.read(prompt_wav, dtype="float32")
        self.log.append(("prompt_wav", (type(prompt_wav).__name__, rate, len(samples))))
        frames = max(1, int(len(samples) / rate * 25))  # 25 speech tokens a second
        speech = torch.arange(frames, dtype=torch.int32).unsqueeze(0)
        text, text_len = _tokens(prompt_text)
        embedding = torch.full((1, 192), float(np.abs(samples).mean()))
        return {"prompt_text": text, "prompt_text_len": text_len,
                "llm_prompt_speech_token": speech,
                "llm_prompt_speech_token_len": torch.tensor([frames], dtype=torch.int32),
                "flow_prompt_speech_token": speech,
                "flow_prompt_speech_token_len": torch.tensor([frames], dtype=torch.int32),
                "prompt_speech_feat": torch.ones(1, 2 * frames, 80),
                "prompt_speech_feat_len": torch.tensor([2 * frames], dtype=torch.int32),
                "llm_embedding": embedding, "flow_embedding": embedding}

    def frontend_zero_shot(self, tts_text: str, prompt_text: str, prompt_wav: Any,
                           resample_rate: int, zero_shot_spk_id: str) -> dict[str, Any]:
        if zero_shot_spk_id == "":
            model_input = self._from_wav(prompt_text, prompt_wav)
        else:
            model_input = {**self.spk2info[zero_shot_spk_id]}  # a copy, as upstream
        model_input["text"], model_input["text_len"] = _tokens(tts_text)
        return model_input

    def frontend_cross_lingual(self, tts_text: str, prompt_wav: Any, resample_rate: int,
                               zero_shot_spk_id: str) -> dict[str, Any]:
        model_input = self.frontend_zero_shot(tts_text, "", prompt_wav, resample_rate,
                                              zero_shot_spk_id)
        for key in ("prompt_text", "prompt_text_len", "llm_prompt_speech_token",
                    "llm_prompt_speech_token_len"):
            del model_input[key]
        return model_input

    def frontend_instruct2(self, tts_text: str, instruct_text: str, prompt_wav: Any,
                           resample_rate: int, zero_shot_spk_id: str) -> dict[str, Any]:
        model_input = self.frontend_zero_shot(tts_text, instruct_text, prompt_wav,
                                              resample_rate, zero_shot_spk_id)
        del model_input["llm_prompt_speech_token"]
        del model_input["llm_prompt_speech_token_len"]
        return model_input


class FakeModel:
    """CosyVoice2Model's entry points the adapter wraps: tts (per call) and llm_job."""

    def __init__(self, owner: FakeCosyVoice2) -> None:
        self.owner = owner
        self.token_hop_len = 25
        self.lock = threading.Lock()  # guards upstream's per-call dicts
        self.tts_speech_token_dict: dict[str, Any] = {}
        self.llm_end_dict: dict[str, bool] = {}
        self.hift_cache_dict: dict[str, Any] = {}

    def llm_job(self, *args: Any) -> None:
        raise AssertionError("the fake runs no LLM thread")

    def tts(self, stream: bool = False, speed: float = 1.0,
            **model_input: Any) -> Iterator[dict[str, Any]]:
        self.owner.model_inputs.append(dict(model_input))
        self.owner.log.append(("tts", {"stream": stream, "speed": speed}))
        if FakeCosyVoice2.fail_with is not None:
            raise FakeCosyVoice2.fail_with
        if FakeCosyVoice2.silent:
            return
        # Two chunks a sentence: 0.1 s at +0.25, then 0.05 s / speed at -0.5.
        yield {"tts_speech": torch.full((1, 2400), 0.25)}
        yield {"tts_speech": torch.full((1, int(1200 / speed)), -0.5)}


class FakeCosyVoice2:
    """cosyvoice.cli.cosyvoice.CosyVoice2 with upstream's signatures; records its calls."""

    instances: ClassVar[list[FakeCosyVoice2]] = []
    fail_with: ClassVar[BaseException | None] = None
    silent: ClassVar[bool] = False

    def __init__(self, model_dir: str, load_jit: bool = False, load_trt: bool = False,
                 load_vllm: bool = False, fp16: bool = False, trt_concurrent: int = 1) -> None:
        self.log: list[tuple[str, Any]] = [("init", {"model_dir": model_dir, "fp16": fp16,
                                                     "load_trt": load_trt})]
        self.sample_rate = RATE
        self.frontend = FakeFrontend(self.log)
        self.model = FakeModel(self)
        self.model_inputs: list[dict[str, Any]] = []
        FakeCosyVoice2.instances.append(self)

    def add_zero_shot_spk(self, prompt_text: str, prompt_wav: Any,
                          zero_shot_spk_id: str) -> bool:
        self.log.append(("add_zero_shot_spk", (prompt_text, zero_shot_spk_id)))
        model_input = self.frontend.frontend_zero_shot("", prompt_text, prompt_wav,
                                                       self.sample_rate, "")
        del model_input["text"]
        del model_input["text_len"]
        self.frontend.spk2info[zero_shot_spk_id] = model_input
        return True


    def inference_zero_shot(self, tts_text: str, prompt_text: str, prompt_wav: Any,
                            zero_shot_spk_id: str = "", stream: bool = False,
                            speed: float = 1.0,
                            text_frontend: bool = True) -> Iterator[dict[str, Any]]:
        self.log.append(("inference_zero_shot", {
            "tts_text": tts_text, "prompt_text": prompt_text, "prompt_wav": prompt_wav,
            "zero_shot_spk_id": zero_shot_spk_id, "stream": stream, "speed": speed,
            "text_frontend": text_frontend}))
        for sentence in self.frontend.text_normalize(tts_text, True, text_frontend):
            yield from self.model.tts(**self.frontend.frontend_zero_shot(
                sentence, prompt_text, prompt_wav, self.sample_rate, zero_shot_spk_id),
                stream=stream, speed=speed)

    def inference_cross_lingual(self, tts_text: str, prompt_wav: Any,
                                zero_shot_spk_id: str = "", stream: bool = False,
                                speed: float = 1.0,
                                text_frontend: bool = True) -> Iterator[dict[str, Any]]:
        self.log.append(("inference_cross_lingual", {
            "tts_text": tts_text, "prompt_wav": prompt_wav,
            "zero_shot_spk_id": zero_shot_spk_id, "stream": stream, "speed": speed,
            "text_frontend": text_frontend}))
        for sentence in self.frontend.text_normalize(tts_text, True, text_frontend):
            yield from self.model.tts(**self.frontend.frontend_cross_lingual(
                sentence, prompt_wav, self.sample_rate, zero_shot_spk_id),
                stream=stream, speed=speed)

    def inference_instruct2(self, tts_text: str, instruct_text: str, prompt_wav: Any,
                            zero_shot_spk_id: str = "", stream: bool = False,
                            speed: float = 1.0,
                            text_frontend: bool = True) -> Iterator[dict[str, Any]]:
        self.log.append(("inference_instruct2", {
            "tts_text": tts_text, "instruct_text": instruct_text, "prompt_wav": prompt_wav,
            "zero_shot_spk_id": zero_shot_spk_id, "stream": stream, "speed": speed,
            "text_frontend": text_frontend}))
        for sentence in self.frontend.text_normalize(tts_text, True, text_frontend):
            yield from self.model.tts(**self.frontend.frontend_instruct2(
                sentence, instruct_text, prompt_wav, self.sample_rate, zero_shot_spk_id),
                stream=stream, speed=speed)

    def calls(self, name: str) -> list[Any]:
        return [args for call, args in self.log if call == name]


class FakeCosyVoice3(FakeCosyVoice2):
    def __init__(self, model_dir: str, load_trt: bool = False, load_vllm: bool = False,
                 fp16: bool = False, trt_concurrent: int = 1) -> None:
        super().__init__(model_dir, load_trt=load_trt, fp16=fp16)


class OldCosyVoice2(FakeCosyVoice2):
    """The early-2025 API: prompts as 16-kHz tensors (same calls otherwise)."""

    def add_zero_shot_spk(self, prompt_text: str, prompt_speech_16k: Any,
                          zero_shot_spk_id: str) -> bool:
        return super().add_zero_shot_spk(prompt_text, prompt_speech_16k, zero_shot_spk_id)


class AncientCosyVoice2(FakeCosyVoice2):
    """Late-2024 API: cross-lingual took no speaker id."""

    def inference_cross_lingual(self, tts_text: str, prompt_speech_16k: Any,  # type: ignore[override]
                                stream: bool = False, speed: float = 1.0,
                                text_frontend: bool = True) -> Iterator[dict[str, Any]]:
        raise AssertionError("not called")


def _install(monkeypatch: pytest.MonkeyPatch, **classes: type) -> None:
    module = types.ModuleType("cosyvoice.cli.cosyvoice")
    module.__file__ = "/fake/cosyvoice/cli/cosyvoice.py"
    for name, cls in classes.items():
        setattr(module, name, cls)
    monkeypatch.setitem(sys.modules, "cosyvoice", types.ModuleType("cosyvoice"))
    monkeypatch.setitem(sys.modules, "cosyvoice.cli", types.ModuleType("cosyvoice.cli"))
    monkeypatch.setitem(sys.modules, "cosyvoice.cli.cosyvoice", module)


def _hide_real_cosyvoice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `cosyvoice` unimportable for one test, also where the real-code tests have put
    upstream's source on sys.path earlier in the session."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("cosyvoice", "matcha")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (
        (Path(p) / "cosyvoice").is_dir() or (Path(p) / "matcha").is_dir())])


@pytest.fixture(autouse=True)
def fake_cosyvoice(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _install(monkeypatch, CosyVoice2=FakeCosyVoice2, CosyVoice3=FakeCosyVoice3)
    FakeCosyVoice2.instances.clear()
    yield
    FakeCosyVoice2.fail_with = None
    FakeCosyVoice2.silent = False


def model_dir(root: Path, generation: int = 3, drop: tuple[str, ...] = ()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"cosyvoice{generation}.yaml").write_text("sample_rate: 24000\n")
    for name in required_files(generation):
        if name in drop:
            continue
        if name == "CosyVoice-BlankEN":
            (root / name).mkdir()
        else:
            (root / name).write_bytes(b"")
    return root


def loaded(tmp_path: Path, generation: int = 3, **kwargs: Any) -> CosyVoiceEngine:
    engine = CosyVoiceEngine(model_dir=str(model_dir(tmp_path / "model", generation)),
                             device="cpu", precision="fp32", **kwargs)
    engine.load()
    return engine


def model_of(engine: CosyVoiceEngine) -> FakeCosyVoice2:
    return FakeCosyVoice2.instances[-1]


def reference(seconds: float = 4.0, rate: int = 16000) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate)


def make_profile(engine: CosyVoiceEngine, voice_id: str = "alice",
                 transcript: str | None = TRANSCRIPT) -> Profile:
    return engine.profile(voice_id=voice_id, sha256=SHA, reference=reference(),
                          prompt_text=transcript, measures=MEASURES)


# -- start-up -------------------------------------------------------------------------------


def test_unset_model_dir_fails_at_load(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir="").load()
    assert str(err.value) == (
        "VF_COSYVOICE_MODEL_DIR is not set: point it at a local CosyVoice2-0.5B or "
        "Fun-CosyVoice3-0.5B directory (weights are never downloaded at run time; see "
        "docs/cosyvoice.md)")


def test_missing_model_dir_fails_at_load(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(tmp_path / "nope")).load()
    assert str(err.value) == (f"VF_COSYVOICE_MODEL_DIR={tmp_path / 'nope'} does not exist "
                              "or is not a directory")


def test_a_directory_without_a_cosyvoice_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(tmp_path)).load()
    assert str(err.value) == (f"{tmp_path} has neither cosyvoice3.yaml nor cosyvoice2.yaml: "
                              "it is not a CosyVoice 2/3 model directory")
    (tmp_path / "cosyvoice.yaml").write_text("")
    with pytest.raises(EngineUnavailable, match=r"holds a CosyVoice 1 model \(cosyvoice.yaml\)"):
        CosyVoiceEngine(model_dir=str(tmp_path)).load()


@pytest.mark.parametrize(("generation", "drop", "named"), [
    (3, ("flow.pt", "speech_tokenizer_v3.onnx"), "flow.pt, speech_tokenizer_v3.onnx"),
    (2, ("CosyVoice-BlankEN",), "CosyVoice-BlankEN"),
    (2, ("llm.pt", "hift.pt", "campplus.onnx"), "llm.pt, hift.pt, campplus.onnx"),
])
def test_missing_files_are_named(tmp_path: Path, generation: int, drop: tuple[str, ...],
                                 named: str) -> None:
    root = model_dir(tmp_path, generation, drop)
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(root), device="cpu", precision="fp32").load()
    assert str(err.value) == (f"{root} (cosyvoice{generation}.yaml) lacks {named}: download "
                              "the complete model directory (docs/cosyvoice.md)")
    assert FakeCosyVoice2.instances == []  # refused before any weights were read


def test_missing_package_says_how_to_install(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_real_cosyvoice(monkeypatch)
    root = model_dir(tmp_path)
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(root)).load()
    assert str(err.value) == (
        "the cosyvoice package is not importable (FunAudioLLM's CosyVoice is a repository, "
        "not a PyPI package; PyPI's `cosyvoice` is an unrelated wrapper): git clone "
        "--recursive https://github.com/FunAudioLLM/CosyVoice, pip install "
        "'voicefactory[cosyvoice]', and set VF_COSYVOICE_SOURCE to the clone (or put it and "
        "its third_party/Matcha-TTS on PYTHONPATH); docs/cosyvoice.md")
    # Some other `cosyvoice` (a module, not FunAudioLLM's package) is named as such.
    monkeypatch.setitem(sys.modules, "cosyvoice", types.ModuleType("cosyvoice"))
    with pytest.raises(EngineUnavailable, match=r"a `cosyvoice` package is importable but "
                       r"has no cosyvoice\.cli: it is not FunAudioLLM's CosyVoice"):
        CosyVoiceEngine(model_dir=str(root)).load()


@pytest.mark.parametrize(("imports", "message"), [
    ("import matcha.models.components", "CosyVoice imports `matcha` from its "
     "third_party/Matcha-TTS submodule: add <clone>/third_party/Matcha-TTS to PYTHONPATH or "
     "set VF_COSYVOICE_SOURCE (run `git submodule update --init` in the clone if that folder "
     "is empty)"),
    ("import hyperpyyaml_not_installed", "CosyVoice is on the path but its dependency "
     "'hyperpyyaml_not_installed' is missing: pip install 'voicefactory[cosyvoice]' "
     "(docs/cosyvoice.md)"),
])
def test_a_clone_with_missing_parts_names_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               imports: str, message: str) -> None:
    _hide_real_cosyvoice(monkeypatch)
    clone = tmp_path / "clone" / "cosyvoice" / "cli"
    clone.mkdir(parents=True)
    (clone.parent / "__init__.py").write_text("")
    (clone / "__init__.py").write_text("")
    (clone / "cosyvoice.py").write_text(imports + "\n")
    monkeypatch.syspath_prepend(str(tmp_path / "clone"))
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(model_dir(tmp_path / "model"))).load()
    assert str(err.value) == message
    for name in [n for n in sys.modules if n == "cosyvoice" or n.startswith("cosyvoice.")]:
        monkeypatch.delitem(sys.modules, name)


def test_a_package_without_the_generation_class_or_speaker_ids_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, CosyVoice2=FakeCosyVoice2)
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(model_dir(tmp_path / "v3", 3))).load()
    assert str(err.value) == (
        f"the installed CosyVoice (/fake/cosyvoice/cli/cosyvoice.py) has no CosyVoice3, "
        f"which {tmp_path / 'v3'} (cosyvoice3.yaml) needs: update the clone (git pull)")
    _install(monkeypatch, CosyVoice2=AncientCosyVoice2)
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(model_dir(tmp_path / "v2", 2))).load()
    assert str(err.value) == (
        "the installed CosyVoice (/fake/cosyvoice/cli/cosyvoice.py) is too old: "
        "CosyVoice2.inference_cross_lingual takes no zero_shot_spk_id; update the clone "
        "(git pull) to a 2025 release or later")


def test_precision_and_device_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(model_dir(tmp_path))
    with pytest.raises(EngineUnavailable, match="VF_PRECISION=bf16: CosyVoice runs in fp32 or "
                       "fp16"):
        CosyVoiceEngine(model_dir=root, device="auto", precision="bf16").load()
    with pytest.raises(EngineUnavailable, match="VF_PRECISION=fp16 needs a GPU"):
        CosyVoiceEngine(model_dir=root, device="cpu", precision="fp16").load()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(EngineUnavailable, match="CosyVoice always uses the first visible GPU"):
        CosyVoiceEngine(model_dir=root, device="cuda:1", precision="fp16").load()
    with pytest.raises(EngineUnavailable, match="VF_DEVICE=cpu, but CosyVoice puts its models"):
        CosyVoiceEngine(model_dir=root, device="cpu", precision="fp32").load()
    assert FakeCosyVoice2.instances == []


def test_fp16_on_a_gpu_reaches_the_constructor_with_the_local_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    root = model_dir(tmp_path)
    engine = CosyVoiceEngine(model_dir=str(root), device="auto", precision="fp16")
    engine.load()
    [init] = model_of(engine).calls("init")
    # The checked local directory, never a ModelScope id the constructor would download.
    assert init == {"model_dir": str(root), "fp16": True, "load_trt": False}
    assert type(model_of(engine)) is FakeCosyVoice3
    assert engine.generation == 3


def test_a_constructor_failure_is_reported_at_start_up(tmp_path: Path) -> None:
    class Broken(FakeCosyVoice3):
        def __init__(self, model_dir: str, load_trt: bool = False, load_vllm: bool = False,
                     fp16: bool = False, trt_concurrent: int = 1) -> None:
            raise ValueError("llm.pt is not a torch checkpoint")

    sys.modules["cosyvoice.cli.cosyvoice"].CosyVoice3 = Broken  # type: ignore[attr-defined]
    root = model_dir(tmp_path)
    with pytest.raises(EngineUnavailable) as err:
        CosyVoiceEngine(model_dir=str(root), device="cpu", precision="fp32").load()
    assert str(err.value) == (f"CosyVoice failed to load {root}: ValueError: llm.pt is not a "
                              "torch checkpoint")


def test_create_engine_reads_the_model_dir_from_its_options(tmp_path: Path) -> None:
    root = model_dir(tmp_path)
    engine = create_engine("cosyvoice", EngineOptions(cosyvoice_model_dir=str(root)))
    assert isinstance(engine, CosyVoiceEngine)
    engine.load()
    assert model_of(engine).calls("init")[0]["model_dir"] == str(root)


# -- profiles -------------------------------------------------------------------------------


@pytest.mark.parametrize(("generation", "prompt"), [
    (2, "希望你以后能够做的比我还好呦。"), (3, V3_PREFIX + "希望你以后能够做的比我还好呦。")])
def test_profile_holds_what_frontend_zero_shot_computes(tmp_path: Path, generation: int,
                                                        prompt: str) -> None:
    engine = loaded(tmp_path, generation)
    profile = engine.profile(voice_id="alice", sha256=SHA, reference=reference(4.0, 44100),
                             prompt_text=" 我有2只猫。 ", measures=MEASURES)
    model = model_of(engine)
    # Normalised as inference_zero_shot normalises a prompt, then in the generation's format.
    assert model.calls("text_normalize") == ["我有2只猫。"]
    assert model.calls("add_zero_shot_spk") == [
        (prompt.replace(TRANSCRIPT, "我有二只猫。"), "vf:alice:abababababababab")]
    # The reference reached the frontend as a WAV file at its own rate, all of it.
    assert model.calls("prompt_wav") == [("str", 44100, 4 * 44100)]
    assert sorted(profile.tensors) == sorted(PROFILE_TENSORS)
    assert all(isinstance(a, np.ndarray) for a in profile.tensors.values())
    assert profile.tensors["llm_prompt_speech_token"].dtype == np.int32
    assert profile.tensors["llm_prompt_speech_token"].shape == (1, 100)  # 4 s * 25 Hz
    assert profile.tensors["prompt_speech_feat"].shape == (1, 200, 80)
    assert profile.tensors["flow_embedding"].dtype == np.float32
    assert profile.text == {"prompt_text": "我有2只猫。", "language": "zh"}
    assert profile.features == {"cosyvoice_generation": float(generation),
                                "sample_rate": 24000.0}
    assert (profile.engine, profile.voice_id, profile.sha256) == ("cosyvoice", "alice", SHA)


def test_the_pre_2025_frontend_gets_a_16k_tensor(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, CosyVoice2=OldCosyVoice2)
    engine = loaded(tmp_path, 2)
    make_profile(engine)
    assert model_of(engine).calls("prompt_wav") == [("Tensor", 16000, 4 * 16000)]


def test_a_reference_over_30_s_is_refused_by_name(tmp_path: Path) -> None:
    engine = loaded(tmp_path)
    with pytest.raises(VoiceFactoryError) as err:
        engine.profile(voice_id="v", sha256=SHA, reference=reference(31.0), prompt_text=None,
                       measures=MEASURES)
    assert err.value.code is ErrorCode.REFERENCE_INVALID and not err.value.retryable
    assert err.value.message == ("reference too long for CosyVoice: 31.0 s, its speech "
                                 "tokenizer takes <= 30 s")


def test_a_stored_profile_feeds_the_speaker_cache_without_recomputing(tmp_path: Path) -> None:
    original = make_profile(loaded(tmp_path / "a"))
    # The profile tier persists it as safetensors; a new worker loads it from the store.
    path = tmp_path / "profile.safetensors"
    save_file(dict(original.tensors), str(path), metadata=dict(original.text))
    stored = Profile(voice_id="alice", sha256=SHA, engine="cosyvoice",
                     features=dict(original.features), tensors=load_file(str(path)),
                     text=dict(original.text))
    engine = loaded(tmp_path / "b")
    model = model_of(engine)
    [out] = engine.synthesize(stored, [SynthesisItem("今天天气很好。", "zh", 1.0)])
    assert model.frontend.computed == 0  # no prompt features computed from audio
    [model_input] = model.model_inputs
    for key in PROFILE_TENSORS:
        np.testing.assert_array_equal(model_input[key].numpy(), original.tensors[key])
    assert model_input["llm_prompt_speech_token"].dtype == torch.int32
    np.testing.assert_array_equal(model_input["text"].numpy(), _tokens("今天天气很好。")[0])
    assert out.audio.sample_rate == RATE


# -- synthesis ------------------------------------------------------------------------------


def test_zero_shot_call_and_concatenated_chunks(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 3)
    profile = make_profile(engine)
    [out] = engine.synthesize(profile, [SynthesisItem("今天天气很好。明天下雨。", "zh-CN", 1.25)])
    model = model_of(engine)
    # text_frontend=False: our front-end has normalised and split the text already.
    assert model.calls("inference_zero_shot") == [{
        "tts_text": "今天天气很好。明天下雨。", "prompt_text": V3_PREFIX + TRANSCRIPT,
        "prompt_wav": "", "zero_shot_spk_id": "vf:alice:abababababababab", "stream": False,
        "speed": 1.25, "text_frontend": False}]
    assert model.calls("tts") == [{"stream": False, "speed": 1.25}]
    assert out.language == "zh"
    assert out.audio.sample_rate == RATE
    # One model call, its two chunks in order.
    chunk = np.concatenate([np.full(2400, 0.25), np.full(960, -0.5)]).astype(np.float32)
    np.testing.assert_array_equal(out.audio.samples, chunk)
    assert out.audio.samples.dtype == np.float32
    assert [m["prompt_text"].shape[1] for m in model.model_inputs] == [
        len(V3_PREFIX + TRANSCRIPT)]


@pytest.mark.parametrize(("generation", "text"), [
    (2, "Good morning, everyone."), (3, V3_PREFIX + "Good morning, everyone.")])
def test_another_language_is_cross_lingual(tmp_path: Path, generation: int, text: str) -> None:
    engine = loaded(tmp_path, generation)
    profile = make_profile(engine)  # a Mandarin transcript
    [out] = engine.synthesize(profile, [SynthesisItem("Good morning, everyone.", None, 0.8)])
    model = model_of(engine)
    assert model.calls("inference_cross_lingual") == [{
        "tts_text": text, "prompt_wav": "", "zero_shot_spk_id": "vf:alice:abababababababab",
        "stream": False, "speed": 0.8, "text_frontend": False}]
    assert out.language == "en"
    [model_input] = model.model_inputs
    assert "prompt_text" not in model_input and "llm_prompt_speech_token" not in model_input
    assert "flow_prompt_speech_token" in model_input


def test_no_transcript_is_cross_lingual_even_in_the_same_language(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 2)
    profile = make_profile(engine, transcript=None)
    engine.synthesize(profile, [SynthesisItem("今天天气很好。", "zh", 1.0)])
    assert [c["tts_text"] for c in model_of(engine).calls("inference_cross_lingual")] == [
        "今天天气很好。"]
    assert model_of(engine).calls("inference_zero_shot") == []


@pytest.mark.parametrize(("generation", "instruct_text"), [
    (2, "用四川话说这句话<|endofprompt|>"),
    (3, "You are a helpful assistant. 用四川话说这句话<|endofprompt|>")])
def test_an_instruction_goes_to_instruct2_as_the_prompt_text(
        tmp_path: Path, generation: int, instruct_text: str) -> None:
    engine = loaded(tmp_path, generation)
    profile = make_profile(engine)
    [out] = engine.synthesize(profile, [SynthesisItem("今天天气很好。", "zh", 1.0,
                                                      instruct="用四川话说这句话")])
    model = model_of(engine)
    [call] = model.calls("inference_instruct2")
    assert {k: v for k, v in call.items() if k != "zero_shot_spk_id"} == {
        "tts_text": "今天天气很好。", "instruct_text": instruct_text, "prompt_wav": "",
        "stream": False, "speed": 1.0, "text_frontend": False}
    assert call["zero_shot_spk_id"].startswith("vf:alice:abababababababab:instruct:")
    [model_input] = model.model_inputs
    # The instruction, not the voice's transcript, is what the LLM is prompted with.
    np.testing.assert_array_equal(model_input["prompt_text"].numpy(), _tokens(instruct_text)[0])
    assert "llm_prompt_speech_token" not in model_input
    np.testing.assert_array_equal(model_input["flow_prompt_speech_token"].numpy(),
                                  profile.tensors["flow_prompt_speech_token"])
    np.testing.assert_array_equal(model_input["flow_embedding"].numpy(),
                                  profile.tensors["flow_embedding"])
    assert out.language == "zh"
    assert set(model.frontend.spk2info) == {"vf:alice:abababababababab"}  # per-call entry gone


@pytest.mark.parametrize(("item", "instruct_text"), [
    (SynthesisItem("今天天气很好。", "zh", 1.0,
                   style=StyleHints(emotion="sad", free_text="用悲伤的语气说")),
     "You are a helpful assistant. 用悲伤的语气说<|endofprompt|>"),
    (SynthesisItem("今天天气很好。", "zh", 1.0, style=StyleHints(dialect="sichuan")),
     "You are a helpful assistant. 请用四川话表达。<|endofprompt|>"),
    (SynthesisItem("今日天氣好好。", "yue", 1.0),
     "You are a helpful assistant. 请用广东话表达。<|endofprompt|>"),
    (SynthesisItem("今天天气很好。", "zh", 1.0, style=StyleHints(emotion="happy")),
     "You are a helpful assistant. 请非常开心地说一句话。<|endofprompt|>"),
])
def test_style_hints_become_an_instruction(tmp_path: Path, item: SynthesisItem,
                                           instruct_text: str) -> None:
    engine = loaded(tmp_path, 3)
    engine.synthesize(make_profile(engine), [item])
    assert [c["instruct_text"] for c in model_of(engine).calls("inference_instruct2")] == [
        instruct_text]


def test_the_cached_speaker_survives_cross_lingual_and_instruct_calls(tmp_path: Path) -> None:
    engine = loaded(tmp_path, 2)
    profile = make_profile(engine)
    batch = [SynthesisItem("Good morning.", "en", 1.0),
             SynthesisItem("See you later.", "en", 1.0),
             SynthesisItem("今天天气很好。", "zh", 1.0, instruct="用四川话说这句话"),
             SynthesisItem("今天天气很好。", "zh", 1.0)]
    engine.synthesize(profile, batch)
    model = model_of(engine)
    assert len(model.model_inputs) == 4
    zero_shot = model.model_inputs[-1]
    # Cross-lingual and instruct2 delete keys from a copy of the cached entry (upstream since
    # 3b44913; the adapter copies the entry it gives instruct2 itself).
    for key in PROFILE_TENSORS:
        np.testing.assert_array_equal(zero_shot[key].numpy(), profile.tensors[key])
    assert set(model.frontend.spk2info["vf:alice:abababababababab"]) == set(PROFILE_TENSORS)


def test_out_of_memory_asks_for_a_smaller_batch(tmp_path: Path) -> None:
    engine = loaded(tmp_path)
    profile = make_profile(engine)
    FakeCosyVoice2.fail_with = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(EngineOutOfMemory) as err:
        engine.synthesize(profile, [SynthesisItem("今天天气很好。", "zh", 1.0)])
    assert err.value.retryable
    assert err.value.message == ("device out of memory: CUDA out of memory. Tried to allocate "
                                 "2.00 GiB")


def test_other_failures_are_retryable_engine_errors(tmp_path: Path) -> None:
    engine = loaded(tmp_path)
    profile = make_profile(engine)
    FakeCosyVoice2.fail_with = AssertionError("do not support extract speech token")
    with pytest.raises(VoiceFactoryError) as err:
        engine.synthesize(profile, [SynthesisItem("Hello there.", "en", 1.0)])
    assert err.value.code is ErrorCode.ENGINE_ERROR and err.value.retryable
    assert err.value.message == ("CosyVoice failed on a cross_lingual item of voice 'alice': "
                                 "AssertionError: do not support extract speech token")
    FakeCosyVoice2.fail_with = None
    FakeCosyVoice2.silent = True
    with pytest.raises(VoiceFactoryError, match="CosyVoice returned no audio"):
        engine.synthesize(profile, [SynthesisItem("Hello there.", "en", 1.0)])


def test_languages_follow_the_generation(tmp_path: Path) -> None:
    v2 = loaded(tmp_path / "2", 2)
    with pytest.raises(VoiceFactoryError) as err:
        v2.synthesize(make_profile(v2), [SynthesisItem("Bonjour à tous.", "fr", 1.0)])
    assert err.value.code is ErrorCode.UNSUPPORTED_LANGUAGE and not err.value.retryable
    assert err.value.message == ("CosyVoice 2 does not speak 'fr'; it speaks zh, en, yue, ja, "
                                 "ko (dialects through an instruction)")
    v3 = loaded(tmp_path / "3", 3)
    [out] = v3.synthesize(make_profile(v3), [SynthesisItem("Bonjour à tous.", "fr", 1.0)])
    assert out.language == "fr"
    assert "fr" in v3.capabilities.languages and "fr" not in v2.capabilities.languages


def test_a_profile_of_another_generation_is_refused(tmp_path: Path) -> None:
    v2_profile = make_profile(loaded(tmp_path / "2", 2))
    v3 = loaded(tmp_path / "3", 3)
    with pytest.raises(VoiceFactoryError) as err:
        v3.synthesize(v2_profile, [SynthesisItem("你好。", "zh", 1.0)])
    assert err.value.message == (
        "profile of voice 'alice' was made by cosyvoice generation 2, this worker runs "
        "CosyVoice 3; delete the stored profile so it is recomputed")
    assert model_of(v3).calls("inference_zero_shot") == []


def test_speaker_cache_is_bounded(tmp_path: Path) -> None:
    engine = loaded(tmp_path, speaker_slots=2)
    profiles = [make_profile(engine, voice_id=v) for v in ("a", "b", "c")]
    table = model_of(engine).frontend.spk2info
    assert set(table) == {speaker_id("b", SHA), speaker_id("c", SHA)}
    engine.synthesize(profiles[0], [SynthesisItem("你好。", "zh", 1.0)])  # back from the profile
    assert set(table) == {speaker_id("c", SHA), speaker_id("a", SHA)}


def test_capabilities_are_honest() -> None:
    caps = CosyVoiceEngine(model_dir="").capabilities
    assert caps.languages == ("zh", "en", "yue", "ja", "ko")
    assert caps.modes == ("zero_shot", "cross_lingual", "instruct")
    assert (caps.batching, caps.streaming) == (False, True)
    assert "3-s reference" in caps.cloning


def test_synthesize_before_load_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match=r"load\(\) must run before"):
        CosyVoiceEngine(model_dir="x").synthesize(
            Profile("v", SHA, "cosyvoice"), [SynthesisItem("hi", "en", 1.0)])


# -- the call plan, pure --------------------------------------------------------------------


def test_plan_call_modes() -> None:
    item = SynthesisItem("你食咗飯未呀？", None, 1.0)  # detected as Cantonese
    assert plan_call(item, voice_language="yue", has_transcript=True, generation=3).mode == \
        "zero_shot"
    call = plan_call(item, voice_language="zh", has_transcript=True, generation=2)
    assert (call.mode, call.language, call.instruction) == ("instruct", "yue",
                                                            "用粤语说这句话<|endofprompt|>")
    ready = SynthesisItem("x", "en", 1.0, instruct="Speak softly.<|endofprompt|>")
    assert plan_call(ready, voice_language="en", has_transcript=True,
                     generation=3).instruction == "Speak softly.<|endofprompt|>"
    with pytest.raises(VoiceFactoryError, match="dialect 'klingon' has no CosyVoice instruction"):
        plan_call(SynthesisItem("你好", "zh", 1.0, style=StyleHints(dialect="klingon")),
                  voice_language="zh", has_transcript=True, generation=3)
    with pytest.raises(InvalidRequest, match="is not a BCP-47 tag"):
        plan_call(SynthesisItem("hi", "!!", 1.0), voice_language="en", has_transcript=True,
                  generation=3)


def test_annotations_reach_cosyvoice_in_its_inpainting_form() -> None:
    from pipeline.engines.base import SynthesisItem
    from pipeline.engines.cosyvoice_prompts import plan_call

    item = SynthesisItem("对报道给[j][ǐ]予好评，I read[R][EH1][D] it.", "zh", 1.0)
    call = plan_call(item, voice_language="zh", has_transcript=True, generation=3)
    assert call.text == "对报道[j][ǐ]予好评，I [R][EH1][D] it."
