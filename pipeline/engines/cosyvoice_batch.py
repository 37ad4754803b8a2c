"""Several texts through CosyVoice 2/3's speech-token LLM at once: one forward a step for all.

Upstream's `Qwen2LM.inference` decodes one text: a prefill of [sos, text, task_id, prompt
speech tokens], then one forward per speech token, each with a batch of one. On a GPU that
step is bound by reading the weights, not by arithmetic, so B texts decoded side by side cost
little more a step than one. The adapter (cosyvoice.py) hands a batch of one voice's items
here, then turns each item's tokens into audio with upstream's own `token2wav`:

    upstream frontend_* model inputs (one a text)
    -> lm_input(): the prefill embedding of each, as upstream's inference builds it, and its
       min / max token counts (2x / 20x the text's tokens)
    -> decode(): left-padded prefill [B, T] with an attention mask and per-row positions
       through the Qwen2 body (not its text-vocabulary head, which upstream computes and
       drops) -> per step: last hidden state -> llm_decoder -> log-softmax -> upstream's
       sampling_ids on each unfinished row (its own tokens so far, its own min_len) -> the
       sampled token's speech embedding is the next input of every row; a row ends at a
       stop id or its max_len, the call when every row has
    -> drop_long_silences(): what upstream's llm_job keeps of a row (at most 5 silent tokens
       in a row, CosyVoice 3's FSQ silence ids)
    -> speech(): on a GPU the rows through flow matching together (cosyvoice_flow), then each
       through HiFT at its item's speed; on a CPU, or where the flow cannot take a batch (a
       TensorRT estimator), each row through upstream's token2wav under a uuid of its own.

A finished row goes on being fed (its outputs unread): rows never attend to each other, so
that changes nothing for the others and keeps the cache one rectangle. `batchable()` says
when this path applies; a vLLM-backed LLM, or an LLM class other than upstream's Qwen2 ones,
keeps the one-text path.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.engines import cosyvoice_flow

MAX_SILENT_RUN = 5  # upstream's llm_job keeps at most this many silent tokens in a row
SAMPLING_TOP_K = 25  # upstream's Qwen2LM.inference default, which its tts() never changes
_QWEN_LMS = ("Qwen2LM", "CosyVoice3LM")


@dataclass(frozen=True)
class LmInput:
    """One text's prefill embedding [1, T, D] and how many speech tokens it may take."""

    embedding: Any
    min_len: int
    max_len: int


def batchable(llm: Any) -> bool:
    """Whether `decode` can drive this LLM: upstream's Qwen2 LMs on transformers, no vLLM."""
    return (type(llm).__name__ in _QWEN_LMS and not hasattr(llm, "vllm")
            and hasattr(getattr(llm, "llm", None), "model"))


def lm_input(llm: Any, model_input: Mapping[str, Any], device: Any, *,
             min_ratio: float = 2.0, max_ratio: float = 20.0) -> LmInput:
    """The prefill of one frontend_* model input, as Qwen2LM.inference concatenates it:
    sos, the prompt text's and the text's token embeddings, task_id, the prompt's speech
    token embeddings (none in cross-lingual and instruct calls)."""
    import torch

    text = model_input["text"].to(device)
    prompt_text = model_input.get("prompt_text", torch.zeros(1, 0, dtype=torch.int32)).to(device)
    speech = model_input.get("llm_prompt_speech_token",
                             torch.zeros(1, 0, dtype=torch.int32)).to(device)
    text_emb = llm.llm.model.model.embed_tokens(torch.concat([prompt_text, text], dim=1))
    # CosyVoice 3 keeps sos and task_id among the speech embeddings, CosyVoice 2 in its own.
    table = llm.speech_embedding if type(llm).__name__ == "CosyVoice3LM" else llm.llm_embedding
    sos = table.weight[llm.sos].reshape(1, 1, -1)
    task_id = table.weight[llm.task_id].reshape(1, 1, -1)
    if speech.shape[1]:
        speech_emb = llm.speech_embedding(speech)
    else:
        speech_emb = torch.zeros(1, 0, llm.llm_input_size, dtype=text_emb.dtype, device=device)
    text_len = int(text.shape[1])
    return LmInput(embedding=torch.concat([sos, text_emb, task_id, speech_emb], dim=1),
                   min_len=int(text_len * min_ratio), max_len=int(text_len * max_ratio))


def decode(llm: Any, inputs: Sequence[LmInput], sampling: int = SAMPLING_TOP_K
           ) -> list[list[int]]:
    """Each input's speech tokens (stop id excluded), all rows stepped together."""
    import torch

    if not inputs:
        return []
    # The Qwen2 body only: upstream calls the whole Qwen2ForCausalLM for its last hidden
    # state, which also projects every position onto the 151,936-token text vocabulary
    # (about a quarter of a step's multiply-adds at CosyVoice 2's size) and drops the result.
    qwen = llm.llm.model.model
    device = inputs[0].embedding.device
    lengths = [int(x.embedding.shape[1]) for x in inputs]
    longest = max(lengths)
    width = inputs[0].embedding.shape[2]
    # Left padding: every row's last prefill position is the same column, so one step
    # appends one column for all of them.
    prefill = torch.zeros(len(inputs), longest, width, dtype=inputs[0].embedding.dtype,
                          device=device)
    mask = torch.zeros(len(inputs), longest, dtype=torch.long, device=device)
    for row, (x, n) in enumerate(zip(inputs, lengths, strict=True)):
        prefill[row, longest - n:] = x.embedding[0]
        mask[row, longest - n:] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    tokens: list[list[int]] = [[] for _ in inputs]
    done = [x.max_len <= 0 for x in inputs]
    step_input, cache = prefill, None
    stop_ids = set(llm.stop_token_ids)
    for _step in range(max(x.max_len for x in inputs)):
        if all(done):
            break
        out = qwen(inputs_embeds=step_input, attention_mask=mask, position_ids=positions,
                   past_key_values=cache, use_cache=True, return_dict=True)
        cache = out.past_key_values
        logp = llm.llm_decoder(out.last_hidden_state[:, -1]).log_softmax(dim=-1)
        next_ids = []
        for row, x in enumerate(inputs):
            if done[row]:
                next_ids.append(0)
                continue
            top = int(llm.sampling_ids(logp[row], tokens[row], sampling,
                                       ignore_eos=len(tokens[row]) < x.min_len))
            if top in stop_ids:
                done[row] = True
                next_ids.append(0)
                continue
            tokens[row].append(top)
            done[row] = len(tokens[row]) >= x.max_len
            next_ids.append(top)
        ids = torch.tensor(next_ids, device=device)
        step_input = llm.speech_embedding.weight[ids].unsqueeze(1)
        mask = torch.concat([mask, mask.new_ones(len(inputs), 1)], dim=1)
        positions = positions[:, -1:] + 1
    return tokens


def speech(cosyvoice_model: Any, model_inputs: Sequence[Mapping[str, Any]],
           speeds: Sequence[float], sampling: int = SAMPLING_TOP_K) -> list[Any]:
    """Each model input's audio, [1, samples] on the CPU: the LLM batched, then the flow's
    Euler steps batched and HiFT for each on a GPU, token2wav for each elsewhere.
    `cosyvoice_model` is upstream's CosyVoice2Model / CosyVoice3Model (`CosyVoice2.model`)."""
    if not model_inputs:  # a batch of pauses only: nothing for the model
        return []
    llm, flow = cosyvoice_model.llm, cosyvoice_model.flow
    with cosyvoice_flow.upstream_autocast(cosyvoice_model):
        rows = decode(llm, [lm_input(llm, x, cosyvoice_model.device) for x in model_inputs],
                      sampling)
    silent = getattr(cosyvoice_model, "silent_tokens", [])
    rows = [drop_long_silences(row, silent) for row in rows]
    if not cosyvoice_flow.worth_batching(cosyvoice_model) or not all(rows):
        # An empty row fails in token2wav as it does upstream: an engine error, not a clip.
        return [_token2wav(cosyvoice_model, x, row, speed)
                for x, row, speed in zip(model_inputs, rows, speeds, strict=True)]
    with cosyvoice_flow.upstream_autocast(cosyvoice_model):  # token2wav's autocast around the flow
        mels = cosyvoice_flow.mel(flow, rows, model_inputs, cosyvoice_model.device)
    return [cosyvoice_flow.vocode(cosyvoice_model, m, speed).cpu()
            for m, speed in zip(mels, speeds, strict=True)]


def _token2wav(cosyvoice_model: Any, model_input: Mapping[str, Any], tokens: list[int],
               speed: float) -> Any:
    import torch

    call_id = f"vf-batch-{uuid.uuid4().hex}"
    with cosyvoice_model.lock:  # upstream's tts registers its uuid under this lock too
        cosyvoice_model.hift_cache_dict[call_id] = None
    try:
        audio = cosyvoice_model.token2wav(
            token=torch.tensor(tokens, dtype=torch.int32).unsqueeze(0),
            prompt_token=model_input["flow_prompt_speech_token"],
            prompt_feat=model_input["prompt_speech_feat"],
            embedding=model_input["flow_embedding"], token_offset=0, uuid=call_id,
            finalize=True, speed=speed)
    finally:
        with cosyvoice_model.lock:
            cosyvoice_model.hift_cache_dict.pop(call_id, None)
    return audio.cpu()


def drop_long_silences(tokens: Sequence[int], silent: Sequence[int],
                       max_run: int = MAX_SILENT_RUN) -> list[int]:
    """The tokens upstream's llm_job passes on: a run of silent ids cut after `max_run`."""
    kept: list[int] = []
    run = 0
    quiet = set(silent)
    for token in tokens:
        if token in quiet:
            run += 1
            if run > max_run:
                continue
        else:
            run = 0
        kept.append(token)
    return kept
