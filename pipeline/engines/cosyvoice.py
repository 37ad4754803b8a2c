"""The `cosyvoice` engine: CosyVoice 2/3 through FunAudioLLM's Python API, from local weights.

load(): VF_COSYVOICE_MODEL_DIR checked and the package imported (cosyvoice_setup) ->
  DevicePlan from VF_DEVICE/VF_PRECISION -> CosyVoice2/CosyVoice3(model_dir, fp16=...).
profile(reference, prompt_text): reference -> temporary WAV -> model.add_zero_shot_spk
  (speech tokens, mel features, CAM++ embedding: what frontend_zero_shot computes) ->
  numpy `Profile.tensors`, persisted by the profile tier as safetensors.
synthesize(profile, batch): profile tensors -> torch on the model's device -> the frontend's
  zero-shot speaker cache (`spk2info`) under an id derived from voice_id + sha256, so the
  model never recomputes prompt features -> per item, cosyvoice_prompts.plan_call picks
  inference_zero_shot / inference_cross_lingual / inference_instruct2 (stream=False, the
  request's speed) -> the generator's chunks concatenated -> Audio at model.sample_rate.
Out-of-memory errors become `EngineOutOfMemory` (the worker splits the batch); any other
failure inside CosyVoice is a retryable `engine_error`.

Upstream frontends hand out the cached speaker dict itself and then delete keys from it
(cross-lingual drops the LLM prompt, instruct2 the LLM speech tokens) or write per-sentence
text into it; `_FreshEntries` makes every read a shallow copy so one call cannot corrupt
the speaker for the next. With a speaker id, instruct2 would also take the transcript as the
instruction, so instruct calls get a per-call entry whose prompt text is the instruction.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from pipeline.audio import Audio, Samples, encode_wav
from pipeline.engines.base import (
    Capabilities,
    EngineUnavailable,
    Profile,
    SynthesisItem,
    Synthesized,
    VoiceMeasures,
)
from pipeline.engines.cosyvoice_prompts import (
    LANGUAGES_V2,
    LANGUAGES_V3,
    Call,
    plan_call,
)
from pipeline.engines.cosyvoice_prompts import prompt_text as model_prompt_text
from pipeline.engines.cosyvoice_setup import import_cosyvoice, inspect_model_dir, model_class
from pipeline.engines.device import DevicePlan, translate_oom
from pipeline.engines.options import EngineOptions
from pipeline.text import detect
from topics.errors import ErrorCode, VoiceFactoryError

log = logging.getLogger(__name__)

MAX_REFERENCE_S = 30.0  # CosyVoice's speech tokenizer refuses longer prompts
SPEAKER_SLOTS = 256  # voices kept in the model's speaker cache (a few hundred KiB each)
# What frontend_zero_shot returns for a reference, less the per-call `text`/`text_len`.
PROFILE_TENSORS = ("prompt_text", "prompt_text_len", "llm_prompt_speech_token",
                   "llm_prompt_speech_token_len", "flow_prompt_speech_token",
                   "flow_prompt_speech_token_len", "prompt_speech_feat",
                   "prompt_speech_feat_len", "llm_embedding", "flow_embedding")


def speaker_id(voice_id: str, sha256: str) -> str:
    """The zero-shot speaker id of a (voice, reference): a new reference is a new speaker."""
    return f"vf:{voice_id}:{sha256[:16]}"


class _FreshEntries(dict[str, Any]):
    """spk2info whose entries are read as shallow copies (see the module docstring)."""

    def __getitem__(self, key: str) -> Any:
        entry = super().__getitem__(key)
        return dict(entry) if isinstance(entry, dict) else entry


class _SpeakerSlots:
    """Which voices sit in the model's speaker cache: least recently used goes first, never
    one that a call in another thread is using."""

    def __init__(self, table: dict[str, Any], capacity: int) -> None:
        self._table = table
        self._capacity = capacity
        self._recent: OrderedDict[str, int] = OrderedDict()  # id -> calls using it
        self._lock = threading.Lock()

    def adopt(self, spk_id: str) -> None:
        """Track an entry that add_zero_shot_spk put in the table."""
        with self._lock:
            self._recent[spk_id] = self._recent.get(spk_id, 0)
            self._recent.move_to_end(spk_id)
            self._evict()

    @contextlib.contextmanager
    def using(self, spk_id: str, build: Callable[[], dict[str, Any]]) -> Iterator[None]:
        with self._lock:
            if spk_id not in self._table:
                self._table[spk_id] = build()
            self._recent[spk_id] = self._recent.get(spk_id, 0) + 1
            self._recent.move_to_end(spk_id)
            self._evict()
        try:
            yield
        finally:
            with self._lock:
                if spk_id in self._recent:
                    self._recent[spk_id] -= 1

    def _evict(self) -> None:
        for spk_id in [k for k, users in self._recent.items() if users == 0]:
            if len(self._recent) <= self._capacity:
                break
            del self._recent[spk_id]
            self._table.pop(spk_id, None)


@contextlib.contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    try:
        yield
    except VoiceFactoryError:
        raise
    except Exception as exc:
        translated = translate_oom(exc)
        if translated is not exc:
            raise translated from exc
        raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                f"CosyVoice failed {what}: {type(exc).__name__}: {exc}",
                                retryable=True) from exc


class CosyVoiceEngine:
    name = "cosyvoice"

    def __init__(self, *, model_dir: str, device: str = "auto", precision: str = "fp16",
                 empty_cache: bool = False, speaker_slots: int = SPEAKER_SLOTS) -> None:
        self._model_dir = model_dir
        self._device = device
        self._precision = precision
        self._empty_cache = empty_cache
        self._speaker_slots = speaker_slots
        self._model: Any = None
        self._plan: DevicePlan | None = None
        self._generation = 0
        self._sample_rate = 0
        self._slots: _SpeakerSlots | None = None
        self._wav_prompts = True  # frontends since mid-2025 take a file, older ones a tensor

    @classmethod
    def from_options(cls, options: EngineOptions) -> CosyVoiceEngine:
        return cls(model_dir=options.cosyvoice_model_dir, device=options.device,
                   precision=options.precision, empty_cache=options.empty_cache)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=LANGUAGES_V3 if self._generation >= 3 else LANGUAGES_V2,
            modes=("zero_shot", "cross_lingual", "instruct"),
            batching=False,  # every inference_* call takes one text
            # The API streams (stream=True yields chunks); the adapter asks for whole clips
            # because the pipeline stores whole objects.
            streaming=True,
            cloning="timbre + prosody from a 3-s reference (zero-shot speaker prompt)")

    @property
    def generation(self) -> int:
        return self._generation

    # -- start-up -------------------------------------------------------------------------

    def load(self) -> None:
        layout = inspect_model_dir(self._model_dir)
        cls = model_class(import_cosyvoice(), layout)
        plan = self._device_plan()
        log.info("loading %s from %s (%s, %s)", layout.class_name, layout.path, plan.device,
                 plan.precision)
        try:
            # Only keyword arguments both generations take: CosyVoice3 has no load_jit.
            model = cls(str(layout.path), fp16=plan.precision == "fp16")
        except Exception as exc:
            raise EngineUnavailable(f"CosyVoice failed to load {layout.path}: "
                                    f"{type(exc).__name__}: {exc}") from exc
        frontend = model.frontend
        if not callable(getattr(frontend, "_extract_text_token", None)):
            raise EngineUnavailable(f"{layout.class_name}.frontend has no _extract_text_token; "
                                    "this CosyVoice version is not supported")
        frontend.spk2info = _FreshEntries(getattr(frontend, "spk2info", None) or {})
        params = list(inspect.signature(model.add_zero_shot_spk).parameters)
        self._wav_prompts = "prompt_speech_16k" not in params
        self._model, self._plan = model, plan
        self._generation, self._sample_rate = layout.generation, int(model.sample_rate)
        self._slots = _SpeakerSlots(frontend.spk2info, self._speaker_slots)

    def _device_plan(self) -> DevicePlan:
        if self._precision == "bf16":
            raise EngineUnavailable("VF_PRECISION=bf16: CosyVoice runs in fp32 or fp16 "
                                    "(its fp16 switch); use fp16 on a GPU")
        try:
            plan = DevicePlan.resolve(self._device, self._precision,
                                      empty_cache=self._empty_cache)
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

    def _loaded(self) -> tuple[Any, DevicePlan, _SpeakerSlots]:
        if self._model is None or self._plan is None or self._slots is None:
            raise RuntimeError("CosyVoiceEngine.load() must run before profile/synthesize")
        return self._model, self._plan, self._slots

    # -- voices ---------------------------------------------------------------------------

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        model, plan, slots = self._loaded()
        if reference.duration_s > MAX_REFERENCE_S:
            raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID,
                                    f"reference too long for CosyVoice: "
                                    f"{reference.duration_s:.1f} s, its speech tokenizer takes "
                                    f"<= {MAX_REFERENCE_S:.0f} s", retryable=False)
        transcript = (prompt_text or "").strip()
        spk_id = speaker_id(voice_id, sha256)
        try:
            with _engine_errors(f"computing the profile of voice {voice_id!r}"), \
                    plan.inference():
                if transcript:
                    # As inference_zero_shot does to a prompt text it is given.
                    normalised = model.frontend.text_normalize(transcript, split=False)
                    transcript = "".join(normalised) if isinstance(normalised, list) \
                        else normalised
                with self._prompt_speech(reference) as speech:
                    model.add_zero_shot_spk(model_prompt_text(transcript, self._generation),
                                            speech, spk_id)
                entry = model.frontend.spk2info[spk_id]
        finally:
            plan.after_batch()
        slots.adopt(spk_id)
        missing = [k for k in PROFILE_TENSORS if k not in entry]
        if missing:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "CosyVoice's add_zero_shot_spk "
                                    f"returned no {', '.join(missing)}", retryable=False)
        return Profile(
            voice_id=voice_id, sha256=sha256, engine=self.name,
            features={"cosyvoice_generation": float(self._generation),
                      "sample_rate": float(self._sample_rate)},
            tensors={key: _to_numpy(entry[key]) for key in PROFILE_TENSORS},
            text={"prompt_text": (prompt_text or "").strip(),
                  "language": detect(transcript) if transcript else ""})

    @contextlib.contextmanager
    def _prompt_speech(self, reference: Audio) -> Iterator[Any]:
        """The reference as this CosyVoice version's frontend reads it."""
        if not self._wav_prompts:
            import torch

            from pipeline.encode import resample

            yield torch.tensor(resample(reference, 16000).samples).unsqueeze(0)
            return
        fd, path = tempfile.mkstemp(prefix="vf-reference-", suffix=".wav")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(encode_wav(reference))
            yield path
        finally:
            os.unlink(path)

    # -- synthesis ------------------------------------------------------------------------

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        model, plan, slots = self._loaded()
        self._check_profile(profile)
        spk_id = speaker_id(profile.voice_id, profile.sha256)
        try:
            with slots.using(spk_id, lambda: self._on_device(profile.tensors)):
                return [self._one(model, plan, profile, spk_id, item) for item in batch]
        finally:
            plan.after_batch()

    def _check_profile(self, profile: Profile) -> None:
        generation = int(profile.features.get("cosyvoice_generation", 0))
        if profile.engine != self.name or generation != self._generation:
            raise VoiceFactoryError(
                ErrorCode.ENGINE_ERROR,
                f"profile of voice {profile.voice_id!r} was made by {profile.engine} "
                f"generation {generation}, this worker runs CosyVoice {self._generation}; "
                "delete the stored profile so it is recomputed", retryable=False)
        missing = [k for k in PROFILE_TENSORS if k not in profile.tensors]
        if missing:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                    f"profile of voice {profile.voice_id!r} lacks "
                                    f"{', '.join(missing)}", retryable=False)

    def _on_device(self, tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
        import torch

        device = getattr(self._model.frontend, "device", "cpu")
        # torch.tensor copies: arrays loaded from safetensors may be read-only.
        return {key: torch.tensor(tensors[key]).to(device) for key in PROFILE_TENSORS}

    def _one(self, model: Any, plan: DevicePlan, profile: Profile, spk_id: str,
             item: SynthesisItem) -> Synthesized:
        call = plan_call(item, voice_language=profile.text.get("language", ""),
                         has_transcript=bool(profile.text.get("prompt_text")),
                         generation=self._generation)
        log.debug("voice %s: %s in %s", profile.voice_id, call.mode, call.language)
        with _engine_errors(f"on a {call.mode} item of voice {profile.voice_id!r}"), \
                plan.inference():
            if call.mode == "zero_shot":
                transcript = model_prompt_text(profile.text["prompt_text"], self._generation)
                chunks = model.inference_zero_shot(call.text, transcript, "",
                                                   zero_shot_spk_id=spk_id, stream=False,
                                                   speed=item.speed)
                samples = _concatenate(chunks)
            elif call.mode == "cross_lingual":
                chunks = model.inference_cross_lingual(call.text, "", zero_shot_spk_id=spk_id,
                                                       stream=False, speed=item.speed)
                samples = _concatenate(chunks)
            else:
                samples = self._instruct(model, spk_id, call, item.speed)
        return Synthesized(audio=Audio(samples=samples, sample_rate=self._sample_rate),
                           language=call.language)

    def _instruct(self, model: Any, spk_id: str, call: Call, speed: float) -> Samples:
        # A per-call speaker entry: the voice's prompt speech, the instruction as prompt
        # text (what instruct2 computes itself when it is given a wav instead of an id).
        table = model.frontend.spk2info
        entry = table[spk_id]
        entry["prompt_text"], entry["prompt_text_len"] = \
            model.frontend._extract_text_token(call.instruction)
        call_id = f"{spk_id}:instruct:{uuid.uuid4().hex[:12]}"
        table[call_id] = entry
        try:
            chunks = model.inference_instruct2(call.text, call.instruction, "",
                                               zero_shot_spk_id=call_id, stream=False,
                                               speed=speed)
            return _concatenate(chunks)
        finally:
            table.pop(call_id, None)


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value)


def _concatenate(chunks: Iterable[Mapping[str, Any]]) -> Samples:
    pieces = [_to_numpy(chunk["tts_speech"]).astype(np.float32).reshape(-1) for chunk in chunks]
    if not pieces or not sum(len(p) for p in pieces):
        raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "CosyVoice returned no audio",
                                retryable=True)
    samples: Samples = np.clip(np.concatenate(pieces), -1.0, 1.0)
    return samples
