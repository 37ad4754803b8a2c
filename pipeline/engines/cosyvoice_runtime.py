"""What the adapter changes about how upstream CosyVoice runs inside a worker process.

`guard_model(cosyvoice)` at load, on the loaded CosyVoice2/CosyVoice3 object:
  upstream's inference_* -> `cosyvoice.model.tts(**model_input, stream=..., speed=...)` ->
  our `tts` (an attribute of that one model object) -> upstream's own `tts` run against a
  `_CallView` of the shared model: its own `token_hop_len` and its own `llm_job`, every other
  attribute (weights, lock, per-uuid dicts, token2wav) the shared model's ->
  chunks handed back unchanged, then the LLM thread's outcome checked.
Why: upstream runs the LLM in a `threading.Thread`; an exception there (CUDA OOM included)
only reached `threading.excepthook`, and the caller got an unrelated flow/HiFT error or a
truncated clip as success; in streaming mode the loop waited forever for the LLM's end flag.
The view's `llm_job` records the exception and raises the end flag, and `tts` re-raises it in
the caller's thread. Streaming also grows `token_hop_len` on the shared model and only
`__init__` resets it, so a later or concurrent request would start with a larger first hop:
each view starts from the value `__init__` set, and the shared one is never written.

`attend_to_whole_history(cosyvoice)` at load: upstream's Qwen2Encoder.forward_one_step hands
transformers `masks[:, -1, :]`, and its decode loop passes a 1 x 1 mask for every step after
the prefill. transformers 4.x read an all-ones mask as "no padding"; 5.x pads a short mask
with zeros up to the cache's length, so each new speech token attended to the first prefill
position only, not to the text or the tokens before it (tests/cosyvoice pins the hidden
states against one forward over the whole sequence). The encoder's `forward_one_step` is
replaced: the same step with a mask of ones over the cache plus the new input, through the
Qwen2 body only, since upstream kept the last hidden state and dropped the text-vocabulary
logits the whole Qwen2ForCausalLM computed (151,936 ids a position).

`use_soundfile_loader(frontend_module)`: upstream's `load_wav` calls `torchaudio.load`, which
in torchaudio >= 2.9 needs torchcodec and FFmpeg; the frontend's name `load_wav` is pointed at
a loader that reads the WAV the adapter wrote with soundfile, mixes to mono and resamples
with `torchaudio.functional.resample` (the kernel upstream's `Resample` uses).

`quiet_progress(cosyvoice_module)`: upstream wraps every call in a tqdm bar on stderr, which
would break the worker's one-JSON-object-a-line logs; its name `tqdm` gets `disable=True`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Iterator
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

_GUARDED = "_vf_guarded"


class _CallView:
    """One call's view of upstream's shared CosyVoice2Model/CosyVoice3Model."""

    _TABLES = ("tts_speech_token_dict", "llm_end_dict", "hift_cache_dict", "mel_overlap_dict",
               "flow_cache_dict")

    def __init__(self, shared: Any, token_hop_len: int | None) -> None:
        self._shared = shared
        self.error: BaseException | None = None
        self.uuid: str | None = None
        self._forgotten = False
        if token_hop_len is not None:
            self.token_hop_len = token_hop_len  # upstream's tts reads and grows this

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)

    def llm_job(self, *args: Any) -> None:
        """Upstream's llm_job (text, prompt_text, prompt_speech_token, embedding, uuid),
        run in upstream's thread, with its exception kept for the caller."""
        self.uuid = args[-1]
        try:
            self._shared.llm_job(*args)
        except BaseException as exc:
            self.error = exc
            with self._shared.lock:
                if not self._forgotten:
                    # The streaming loop polls this flag; without it a dead LLM hangs it.
                    self._shared.llm_end_dict[self.uuid] = True
        finally:
            with self._shared.lock:
                if self._forgotten:  # the caller left early: what this thread wrote since
                    self._drop()

    def forget(self) -> None:
        """Drop this call's per-uuid state if upstream did not: a call closed or failed
        mid-way never reaches upstream's own clean-up, and its LLM thread may run on."""
        with self._shared.lock:
            self._forgotten = True
            self._drop()

    def _drop(self) -> None:
        if self.uuid is not None:
            for table in self._TABLES:
                getattr(self._shared, table, {}).pop(self.uuid, None)


def _llm_error(view: _CallView) -> BaseException:
    error = view.error
    assert error is not None
    error.add_note("raised in CosyVoice's LLM thread")
    return error


def _run(view: _CallView, tts: Callable[..., Generator[Any, None, None]], args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> Iterator[Any]:
    chunks = tts(view, *args, **kwargs)
    try:
        for chunk in chunks:
            if view.error is not None:
                raise _llm_error(view)
            yield chunk
    except GeneratorExit:
        raise
    except BaseException as exc:
        if view.error is not None and exc is not view.error:
            # flow/HiFT tripped over what the dead LLM left: the LLM's error is the cause.
            raise _llm_error(view) from exc
        raise
    finally:
        chunks.close()
        view.forget()
    if view.error is not None:
        raise _llm_error(view)


def guard_model(cosyvoice: Any) -> None:
    """Route `cosyvoice.model.tts` through per-call views (see the module docstring)."""
    shared = cosyvoice.model
    if getattr(shared, _GUARDED, False):
        return
    if not callable(getattr(type(shared), "tts", None)) or \
            not callable(getattr(shared, "llm_job", None)):
        raise TypeError(f"{type(shared).__name__} has no tts/llm_job")
    upstream_tts = type(shared).tts
    # What upstream's __init__ set; its streaming loop grows the attribute on every call.
    first_hop = getattr(shared, "token_hop_len", None)

    def tts(*args: Any, **kwargs: Any) -> Iterator[Any]:
        return _run(_CallView(shared, first_hop), upstream_tts, args, kwargs)

    shared.tts = tts
    setattr(shared, _GUARDED, True)


def attend_to_whole_history(cosyvoice: Any) -> bool:
    """Give the LLM's decode steps a mask over the whole cache and no unused vocabulary
    head (module docstring). False where the LLM is not upstream's Qwen2Encoder
    (CosyVoice 1) or was already fixed."""
    encoder: Any = getattr(getattr(cosyvoice.model, "llm", None), "llm", None)
    if type(encoder).__name__ != "Qwen2Encoder" or getattr(encoder, _GUARDED, False):
        return False
    body = encoder.model.model  # Qwen2ForCausalLM's Qwen2Model

    def forward_one_step(xs: Any, masks: Any, cache: Any = None) -> Any:
        import torch

        seen = cache.get_seq_length() if cache is not None else 0
        whole = torch.ones(xs.shape[0], seen + xs.shape[1], dtype=torch.bool, device=xs.device)
        out = body(inputs_embeds=xs, attention_mask=whole, past_key_values=cache,
                   use_cache=True, return_dict=True)
        return out.last_hidden_state, out.past_key_values

    encoder.forward_one_step = forward_one_step
    setattr(encoder, _GUARDED, True)
    return True


def _load_wav(wav: str, target_sr: int, min_sr: int = 16000) -> Any:
    """upstream `load_wav`'s contract: [1, samples] float32 at `target_sr`, mono."""
    import soundfile as sf
    import torch
    import torchaudio.functional

    samples, rate = sf.read(wav, dtype="float32", always_2d=True)
    speech = torch.from_numpy(samples.T.copy()).mean(dim=0, keepdim=True)
    if rate != target_sr:
        if rate < min_sr:
            raise ValueError(f"reference sample rate {rate} Hz is below {min_sr} Hz")
        speech = torchaudio.functional.resample(speech, rate, target_sr)
    return speech


def use_soundfile_loader(frontend_module: ModuleType) -> None:
    if not hasattr(frontend_module, "load_wav"):
        raise TypeError(f"{frontend_module.__name__} has no load_wav")
    frontend_module.load_wav = _load_wav  # type: ignore[attr-defined]


def quiet_progress(cosyvoice_module: ModuleType) -> None:
    bar = getattr(cosyvoice_module, "tqdm", None)
    if bar is None or isinstance(bar, functools.partial):
        return
    cosyvoice_module.tqdm = functools.partial(bar, disable=True)  # type: ignore[attr-defined]


def restore_root_logger(handlers: list[logging.Handler], level: int) -> None:
    """Undo upstream's import-time `logging.basicConfig(level=DEBUG)`."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
