"""Tiny random-weight CosyVoice 2 and 3 model folders, built at test time from upstream's code.

`build_model_dir(root, generation)` writes what `CosyVoice2`/`CosyVoice3` read, with the
layout of the released folders and dimensions small enough for a CPU:
  cosyvoice{2,3}.yaml  hyperpyyaml naming upstream's own classes (llm, flow, hift,
                       get_tokenizer, feat_extractor, allowed_special, sample_rate 24000);
  CosyVoice-BlankEN/   a one-layer Qwen2 (vocab 152064) and a byte-level BPE tokenizer whose
                       vocabulary is padded so that <|endoftext|>, <|im_start|>, <|im_end|>
                       get 151643-151645 and upstream's added <|endofprompt|> lands on the
                       151646 that CosyVoice3LM asserts;
  llm.pt, flow.pt, hift.pt  state dicts of the modules the yaml instantiates (loaded strict);
  campplus.onnx        [1, T, 80] fbank -> [1, 192] (mean over time, one projection);
  speech_tokenizer_v{2,3}.onnx  whisper mel [1, 128, T] + length -> int32 [1, ceil(T/4)]
                       tokens < 6561 (every 4th frame, summed, scaled, modulo).
The weights are random: the audio is noise-like, but every upstream stage runs for real.
A random LLM stops at random, and a clip of a few tokens fails checks by chance, so both
yamls name `stop_when_upstream_allows` (below, around upstream's ras_sampling) as the LLM's
sampler: a clip stops as soon as upstream allows (twice as many speech tokens as the text has
tokens), the way a trained model ends a line. Upstream's own guard is not enough: before
min_len it masks only id 6561 (v2's end token, v3's sos), while 6561-6563 stop a v2 and
6561-6760 a v3.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

SPEECH_TOKENS = 6561
QWEN_VOCAB = 152064
FIRST_SPECIAL = 151643  # <|endoftext|> in Qwen2's vocabulary
HIDDEN = 64  # the Qwen2 width, so llm_input_size/llm_output_size

_COMMON_HEAD = """\
sample_rate: 24000
llm_input_size: {hidden}
llm_output_size: {hidden}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1
"""

# `!name:` makes a partial of the wrapper with ras_sampling's arguments.
_SAMPLING = """\
    sampling: !name:tests.cosyvoice.tiny_models.stop_when_upstream_allows
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""

_CFM = """\
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
"""

_HIFT = """\
hift: !new:cosyvoice.hifigan.generator.{cls}
    in_channels: 80
    base_channels: 64
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
{extra}    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.{f0}
        num_class: 1
        in_channels: 80
        cond_channels: 64
"""

_TAIL = """\
get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
    version: {version}
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: 8000
    center: False
"""

# The LLM block both generations share; only the class differs.
_LLM = """\
llm: !new:cosyvoice.llm.llm.{cls}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
"""

# The flow fields both generations share; the class and its input width differ.
_FLOW_HEAD = """\
flow: !new:cosyvoice.flow.flow.{cls}
    input_size: {input_size}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
"""

V2_YAML = _COMMON_HEAD.format(hidden=HIDDEN) + _LLM.format(cls="Qwen2LM") + _SAMPLING \
    + _FLOW_HEAD.format(cls="CausalMaskedDiffWithXvec", input_size=512) + """\
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
        attention_heads: 2
        linear_units: 64
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
""" + _CFM + """\
        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [32]
            dropout: 0.0
            attention_head_dim: 16
            n_blocks: 1
            num_mid_blocks: 1
            num_heads: 2
            act_fn: 'gelu'
            static_chunk_size: 50
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
""" + _HIFT.format(cls="HiFTGenerator", extra="", f0="ConvRNNF0Predictor") \
    + _TAIL.format(version="cosyvoice2")

V3_YAML = _COMMON_HEAD.format(hidden=HIDDEN) + _LLM.format(cls="CosyVoice3LM") + _SAMPLING \
    + _FLOW_HEAD.format(cls="CausalMaskedDiffWithDiT", input_size=80) + """\
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: 64
        pre_lookahead_len: 3
""" + _CFM + """\
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 64
            depth: 1
            heads: 2
            dim_head: 32
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: 50
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
""" + _HIFT.format(cls="CausalHiFTGenerator", extra="    conv_pre_look_right: 4\n",
                   f0="CausalConvRNNF0Predictor") + _TAIL.format(version="cosyvoice3")

CONFIGS = {2: ("cosyvoice2.yaml", V2_YAML, "speech_tokenizer_v2.onnx"),
           3: ("cosyvoice3.yaml", V3_YAML, "speech_tokenizer_v3.onnx")}


def build_qwen(path: Path) -> None:
    """A one-layer Qwen2 and its padded byte-level BPE tokenizer, as save_pretrained writes."""
    transformers = importlib.import_module("transformers")
    tokenizers = importlib.import_module("tokenizers")
    torch = importlib.import_module("torch")
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    # Unreachable filler entries push the special tokens onto Qwen2's ids.
    vocab.update({f"<vf_fill_{i}>": i for i in range(len(vocab), FIRST_SPECIAL)})
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    bpe.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.save_pretrained(str(path))
    config = transformers.Qwen2Config(
        vocab_size=QWEN_VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(str(path))


def stop_when_upstream_allows(weighted_scores: Any, decoded_tokens: list[int], sampling: int,
                              **ras: Any) -> int:
    """The tiny models' LLM sampler: speech tokens until min_len, then a stop id.

    Before min_len upstream's sampling_ids sets the score of id 6561 to -inf (ignore_eos);
    that is the only sign of it a sampler gets, and it is what this reads.
    """
    common = importlib.import_module("cosyvoice.utils.common")
    if weighted_scores[SPEECH_TOKENS].item() != float("-inf"):
        return SPEECH_TOKENS + 1  # a stop id of both: v3's end token, v2's second stop id
    weighted_scores[SPEECH_TOKENS:] = -float("inf")
    return int(common.ras_sampling(weighted_scores, decoded_tokens, sampling, **ras))


def build_campplus(path: Path) -> None:
    """[1, T, 80] fbank -> [1, 192]: the mean frame through one fixed projection."""
    onnx = importlib.import_module("onnx")
    helper, tensor_proto = onnx.helper, onnx.TensorProto
    weight = np.random.default_rng(1).standard_normal((80, 192)).astype(np.float32) * 0.1
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["feats"], ["mean"], axes=[1], keepdims=0),
         helper.make_node("MatMul", ["mean", "weight"], ["embedding"])],
        "campplus",
        [helper.make_tensor_value_info("feats", tensor_proto.FLOAT, [1, "T", 80])],
        [helper.make_tensor_value_info("embedding", tensor_proto.FLOAT, [1, 192])],
        [onnx.numpy_helper.from_array(weight, "weight")])
    _save(onnx, graph, path)


def build_speech_tokenizer(path: Path) -> None:
    """Whisper mel [1, 128, T] (+ int32 length) -> int32 tokens [1, ceil(T/4)], < 6561."""
    onnx = importlib.import_module("onnx")
    helper, tensor_proto, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper

    def const(name: str, values: list[int]) -> Any:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Slice", ["feats", "start", "end", "axis", "step"], ["frames"]),
        helper.make_node("ReduceSum", ["frames", "axis_mel"], ["summed"], keepdims=0),
        helper.make_node("Abs", ["summed"], ["magnitude"]),
        helper.make_node("Mul", ["magnitude", "scale"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["as_int"], to=tensor_proto.INT32),
        helper.make_node("Mod", ["as_int", "codebook"], ["tokens"]),
    ]
    graph = helper.make_graph(
        nodes, "speech_tokenizer",
        [helper.make_tensor_value_info("feats", tensor_proto.FLOAT, [1, 128, "T"]),
         helper.make_tensor_value_info("feats_length", tensor_proto.INT32, [1])],
        [helper.make_tensor_value_info("tokens", tensor_proto.INT32, [1, "N"])],
        [const("start", [0]), const("end", [2**31 - 1]), const("axis", [2]),
         const("step", [4]), const("axis_mel", [1]),
         numpy_helper.from_array(np.array(1000.0, np.float32), "scale"),
         numpy_helper.from_array(np.array(SPEECH_TOKENS, np.int32), "codebook")])
    _save(onnx, graph, path)


def _save(onnx: Any, graph: Any, path: Path) -> None:
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build_model_dir(root: Path, generation: int) -> Path:
    """A complete CosyVoice `generation` (2 or 3) folder under `root`; returns its path."""
    torch = importlib.import_module("torch")
    hyperpyyaml = importlib.import_module("hyperpyyaml")
    config_name, text, tokenizer_name = CONFIGS[generation]
    path = root / f"tiny-cosyvoice{generation}"
    path.mkdir(parents=True)
    (path / config_name).write_text(text)
    qwen = path / "CosyVoice-BlankEN"
    build_qwen(qwen)
    build_campplus(path / "campplus.onnx")
    build_speech_tokenizer(path / tokenizer_name)
    torch.manual_seed(generation)
    configs = hyperpyyaml.load_hyperpyyaml(text, overrides={"qwen_pretrain_path": str(qwen)})
    torch.save(configs["llm"].state_dict(), path / "llm.pt")
    torch.save(configs["flow"].state_dict(), path / "flow.pt")
    torch.save(configs["hift"].state_dict(), path / "hift.pt")
    return path
