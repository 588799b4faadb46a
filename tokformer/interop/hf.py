"""Hugging Face causal-LM folders <-> tokformer ``lm`` models: GPT-2 and the Llama layout.

A Hugging Face folder is ``config.json`` + ``model.safetensors`` (or a sharded
``model.safetensors.index.json``) + ``tokenizer.json`` (or ``vocab.json`` + ``merges.txt``).
Loading gives the ``lm`` task (found through the task registry: its config and
:class:`~tokformer.tokenizers.bpe.BPETokenizer`) and a :class:`~tokformer.language_model.CausalLM`
that computes the same logits; :func:`save_hf_folder` writes a folder that
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` load. Only local paths are
read: nothing here touches the network, and nothing is unpickled.

=======================================  ==================================  ==============================
Hugging Face (Llama / Mistral / Qwen2)    GPT-2                               tokformer
=======================================  ==================================  ==============================
model.embed_tokens                       transformer.wte                     embedder.tokens
(rotary: rope_theta)                     transformer.wpe                     embedder.position.table
layers.i.input_layernorm                 h.i.ln_1                            encoder.blocks.i.norm1
self_attn.{q,k,v}_proj (stacked)         h.i.attn.c_attn (Conv1D: transposed) encoder.blocks.i.attn.qkv
self_attn.o_proj                         h.i.attn.c_proj                     encoder.blocks.i.attn.proj
post_attention_layernorm                 h.i.ln_2                            encoder.blocks.i.norm2
mlp.{gate,up}_proj (stacked)             h.i.mlp.c_fc                        encoder.blocks.i.mlp.fc1
mlp.down_proj                            h.i.mlp.c_proj                      encoder.blocks.i.mlp.fc2
model.norm                               transformer.ln_f                    encoder.norm
lm_head (absent when tied)               lm_head (tied)                      head
=======================================  ==================================  ==============================

What a family option cannot be represented (rope scaling, sliding windows shorter than the
context, a head_dim other than hidden/heads, ...), the converter refuses with one line
naming the option, rather than loading a model that computes something else.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from tokformer.atomic import staged_folder
from tokformer.errors import CheckpointError, ConfigError, DataError, UsageError
from tokformer.files import inside, read_json, regular, shown
from tokformer.language_model import CausalLM
from tokformer.runtime.registry import get_task, name_of
from tokformer.runtime.task import Task
from tokformer.store.budget import check_against_weights, planned_size
from tokformer.store.folder import check_free, check_model_of
from tokformer.store.weights import load_fitting
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.bpe import BPETokenizer

LLAMA_LAYOUT = ("llama", "mistral", "qwen2")
FAMILIES = ("gpt2", *LLAMA_LAYOUT)
EOT = "<|endoftext|>"
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                     "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "quick_gelu": "quick_gelu"}
_GATED = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu"}
# What transformers' config class of each family assumes for a key config.json leaves out (the keys
# read here; transformers 5), so a short hand-written config reads as transformers reads it.
_LLAMA_DEFAULTS = {"rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False}
DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {"n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "tie_word_embeddings": True},
    "llama": {**_LLAMA_DEFAULTS, "max_position_embeddings": 2048, "num_key_value_heads": None,
              "attention_bias": False, "mlp_bias": False},
    "mistral": {**_LLAMA_DEFAULTS, "max_position_embeddings": 131072, "num_key_value_heads": 8,
                "sliding_window": 4096},
    "qwen2": {**_LLAMA_DEFAULTS, "max_position_embeddings": 32768, "num_key_value_heads": 32,
              "use_sliding_window": False},
}
# The largest size or count read from a config.json: past every real model's (vocabularies of 256k
# tokens, contexts of 10M) and small enough that the product of two stays inside torch's int64 sizes;
# 1e30 positions failed in torch.empty, 1e300 were taken and printed as a 300-digit context.
MAX_SIZE = 2**31 - 1


# -- reading a folder ---------------------------------------------------------------------


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of a Hugging Face folder, with a one-line error for a missing or bad file."""
    path = Path(folder) / "config.json"
    if not path.exists():
        raise DataError(f"{folder}: no config.json (not a Hugging Face model folder)")
    config = read_json(path)
    if not isinstance(config, dict) or "model_type" not in config:
        raise DataError(f"{path}: no model_type (not a Hugging Face model config)")
    return config


def read_state(folder: str | os.PathLike) -> dict[str, Tensor]:
    """The weights of a folder: ``model.safetensors`` or the shards its index names, as float32."""
    state: dict[str, Tensor] = {}
    for file in weight_files(Path(folder)):
        try:
            state.update(load_file(regular(file)))
        except FileNotFoundError:
            raise DataError(f"{file}: shard named in the index is missing") from None
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{file}: cannot read safetensors ({err})") from None
    return {name: value.float() if value.is_floating_point() else value for name, value in state.items()}


def weight_files(folder: Path) -> list[Path]:
    """``model.safetensors``, or the shards ``model.safetensors.index.json`` names (each inside ``folder``)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(read_json(index)["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as err:
            raise DataError(f"{index}: not a safetensors index ({err})") from None
        files = [inside(folder, shard, f"{index}: weight_map") for shard in shards]
    elif (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    else:
        pickled = [name for name in ("pytorch_model.bin", "model.pt", "model.pth") if (folder / name).is_file()]
        if pickled:
            raise DataError(
                f"{folder / pickled[0]} is a pickle, which tokformer never loads; convert it once with: python -c "
                f"\"import torch; from safetensors.torch import save_file; save_file(torch.load('{pickled[0]}', "
                f"weights_only=True), 'model.safetensors')\" (run in {folder})"
            )
        raise DataError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    return files


def load_tokenizer(folder: str | os.PathLike, max_length: int) -> BPETokenizer:
    """``tokenizer.json``, else ``vocab.json`` + ``merges.txt``, as a :class:`BPETokenizer`."""
    folder = Path(folder)
    try:
        if (folder / "tokenizer.json").is_file():
            return BPETokenizer.from_hf_json(folder / "tokenizer.json", max_length=max_length)
        if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            vocab = read_json(folder / "vocab.json")
            specials = [EOT] if isinstance(vocab, dict) and EOT in vocab else []  # else refused by name below
            return BPETokenizer.from_vocab_merges(folder / "vocab.json", folder / "merges.txt",
                                                  special_tokens=specials, max_length=max_length)
    except TokenizerError as err:
        raise DataError(f"{folder}: tokenizer not supported: {err}") from None
    raise DataError(f"{folder}: no tokenizer.json or vocab.json + merges.txt (a byte-level BPE tokenizer is needed)")


# -- configs -------------------------------------------------------------------------------


def lm_config_from_hf(hf: dict[str, Any]):
    """The ``lm`` task's config of a Hugging Face config dict; unsupported options are refused by name."""
    LMConfig = get_task("lm").Config  # the task through the registry: interop never imports tasks
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise ConfigError(f"model_type {family!r} is not supported; tokformer converts {', '.join(FAMILIES)}")
    hf = {**DEFAULTS[family], **hf}
    try:
        fields = _gpt2_fields(hf) if family == "gpt2" else _llama_fields(hf, family)
        vocab = _size(hf, "vocab_size")
        return LMConfig(data="", dropout=0.0, vocab_size=vocab, embedding_rows=vocab,
                        tie_embeddings=_flag(hf, "tie_word_embeddings"), **fields)
    except KeyError as err:
        raise ConfigError(f"{family} config has no {err.args[0]!r}") from None
    except ValueError as err:
        raise ConfigError(f"{family} config: {err}") from None


def _size(hf: dict[str, Any], key: str, *, optional: bool = False) -> int | None:
    """A size or count of the config: a whole number from 1 to MAX_SIZE, or null where ``optional``
    (the family's default). int() and float() would take null, true or 1e300 as far as the model
    build, to fail there without naming the key."""
    value = hf[key]
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= MAX_SIZE \
            or value != int(value):
        raise ValueError(f"{key} must be a whole number from 1 to {MAX_SIZE}, got {shown(value)}")
    return int(value)


def _positive(key: str, value: Any) -> float:
    """A positive finite number of the config: a norm's epsilon at or below 0 gave NaN logits, then
    blamed on the weights; null failed in float() without naming the key."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= sys.float_info.max:
        raise ValueError(f"{key} must be a positive finite number, got {shown(value)}")
    return float(value)


def _flag(hf: dict[str, Any], key: str) -> bool:
    """A switch of the config, false where absent or null (as transformers reads it): bool() would
    read "false" or "no" as true."""
    value = hf.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {shown(value)}")
    return value


def _refuse(hf: dict[str, Any], family: str, checks: dict[str, Callable[[Any], bool]]) -> None:
    for key, supported in checks.items():
        if key in hf and not supported(hf[key]):
            raise ConfigError(f"{family} option {key}={hf[key]!r} cannot be represented by tokformer")


def _refuse_switches(hf: dict[str, Any], family: str, *, on: tuple[str, ...] = (), off: tuple[str, ...] = ()) -> None:
    """Switches tokformer represents only ``on`` (or only ``off``), where the config sets them; each is
    read by :func:`_flag`, so ``"false"`` is refused as no switch rather than taken as true."""
    for key in on + off:
        if key in hf and _flag(hf, key) != (key in on):
            raise ConfigError(f"{family} option {key}={hf[key]!r} cannot be represented by tokformer")


def _gpt2_fields(hf: dict[str, Any]) -> dict[str, Any]:
    _refuse_switches(hf, "gpt2", on=("scale_attn_weights",),
                     off=("scale_attn_by_inverse_layer_idx", "add_cross_attention"))
    _refuse(hf, "gpt2", {"activation_function": lambda v: isinstance(v, str) and v in _GPT2_ACTIVATIONS})
    d_model = _size(hf, "n_embd")
    return dict(d_model=d_model, n_heads=_size(hf, "n_head"), n_layers=_size(hf, "n_layer"),
                d_ff=_size(hf, "n_inner", optional=True) or 4 * d_model, context_len=_size(hf, "n_positions"),
                activation=_GPT2_ACTIVATIONS[hf["activation_function"]],
                norm_eps=_positive("layer_norm_epsilon", hf["layer_norm_epsilon"]), position="learned")


def _rope_theta(hf: dict[str, Any], family: str) -> float:
    """``rope_theta`` sits at the top level in older configs, in ``rope_parameters`` in newer ones."""
    params, scaling = hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {}
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if not isinstance(value, dict):
            raise ValueError(f"{key} must be an object or null, got {shown(value)}")
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise ConfigError(f"{family} option rope_type={shown(kind)} (rope scaling) cannot be represented by tokformer")
    return _positive("rope_theta", params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def _llama_fields(hf: dict[str, Any], family: str) -> dict[str, Any]:
    d_model, n_heads = _size(hf, "hidden_size"), _size(hf, "num_attention_heads")
    _refuse_switches(hf, family, off=("qk_norm",))
    _refuse(hf, family, {"hidden_act": lambda v: isinstance(v, str) and v in _GATED})
    if "head_dim" in hf and _size(hf, "head_dim", optional=True) not in (None, d_model / n_heads):
        raise ConfigError(f"{family} option head_dim={hf['head_dim']!r} cannot be represented by tokformer")
    context = _size(hf, "max_position_embeddings")
    # Qwen2 has the switch (off by default), Mistral not (on whenever a window is set)
    sliding = _flag(hf, "use_sliding_window") if "use_sliding_window" in hf else True
    window = _size(hf, "sliding_window", optional=True) if sliding and "sliding_window" in hf else None
    if window is not None:
        context = min(context, window)  # within one window, sliding attention is full attention
    attention_bias = _flag(hf, "attention_bias")
    return dict(d_model=d_model, n_heads=n_heads, n_layers=_size(hf, "num_hidden_layers"),
                d_ff=_size(hf, "intermediate_size"), context_len=context, position="rope",
                rope_theta=_rope_theta(hf, family), norm="rms", norm_eps=_positive("rms_norm_eps", hf["rms_norm_eps"]),
                mlp=_GATED[hf["hidden_act"]], n_kv_heads=_size(hf, "num_key_value_heads", optional=True) or n_heads,
                activation="gelu_tanh" if hf["hidden_act"] == "gelu_pytorch_tanh" else "silu",
                qkv_bias=family == "qwen2" or attention_bias, out_bias=attention_bias and family != "qwen2",
                mlp_bias=_flag(hf, "mlp_bias"))


def family_of(cfg) -> str:
    """The Hugging Face family that represents an ``lm`` model exactly, or a one-line error naming why none does."""
    common = {"qk_norm": cfg.qk_norm, "layer_scale": cfg.layer_scale is not None}
    if any(common.values()):
        raise ConfigError(f"no Hugging Face causal-LM family has {next(k for k, v in common.items() if v)}")
    block = cfg.transformer()
    bias = {name: block.bias_of(name) for name in ("qkv", "out", "mlp")}
    if cfg.position == "learned":
        gpt2 = {"norm": cfg.norm == "layer", "mlp": cfg.mlp == "plain", "biases": all(bias.values()),
                "n_kv_heads": cfg.n_kv_heads in (None, cfg.n_heads),
                "activation": cfg.activation in ("gelu_tanh", "gelu", "relu", "silu", "quick_gelu")}
        if all(gpt2.values()):
            return "gpt2"
        raise ConfigError(f"a learned-position model exports as GPT-2, which needs its {_first_false(gpt2)}")
    llama = {"position": cfg.position == "rope", "norm": cfg.norm == "rms", "mlp": cfg.mlp in ("swiglu", "geglu")}
    if not all(llama.values()):
        raise ConfigError(f"no Hugging Face family matches this model's {_first_false(llama)} "
                          "(GPT-2: learned positions; Llama: rope, rms, swiglu)")
    if bias["qkv"] and not bias["out"] and not bias["mlp"]:
        return "qwen2"
    if bias["qkv"] == bias["out"]:
        return "llama"
    raise ConfigError("biases on the attention output only have no Hugging Face family")


def _first_false(checks: dict[str, bool]) -> str:
    return next(name for name, ok in checks.items() if not ok)


def hf_config(cfg, family: str, tokenizer) -> dict[str, Any]:
    """The ``config.json`` of ``family`` for an ``lm`` config."""
    specials = tokenizer.special_tokens
    common = {"model_type": family, "vocab_size": cfg.embedding_rows or tokenizer.vocab_size,
              "tie_word_embeddings": cfg.tie_embeddings, "bos_token_id": specials.get(cfg.bos_token),
              "eos_token_id": specials.get(cfg.eos_token),
              "torch_dtype": "float32"}
    if family == "gpt2":
        activation = {"gelu_tanh": "gelu_new"}.get(cfg.activation, cfg.activation)
        return {**common, "architectures": ["GPT2LMHeadModel"], "n_embd": cfg.d_model, "n_head": cfg.n_heads,
                "n_layer": cfg.n_layers, "n_inner": cfg.d_ff, "n_positions": cfg.context_len,
                "activation_function": activation, "layer_norm_epsilon": cfg.norm_eps,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}[family]
    act = "silu" if cfg.mlp == "swiglu" else ("gelu_pytorch_tanh" if cfg.activation == "gelu_tanh" else "gelu")
    block = cfg.transformer()
    out = {**common, "architectures": [arch], "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads,
           "num_key_value_heads": block.kv_heads, "num_hidden_layers": cfg.n_layers,
           "intermediate_size": block.ff_width, "max_position_embeddings": cfg.context_len, "hidden_act": act,
           "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "head_dim": block.d_head,
           "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta}, "attention_dropout": 0.0}
    if family == "llama":
        out.update(attention_bias=block.bias_of("qkv"), mlp_bias=block.bias_of("mlp"))
    return out


# -- weights -------------------------------------------------------------------------------


def _gpt2_keys(i: int) -> dict[str, tuple[str, bool]]:
    """tokformer block key -> (GPT-2 key, is a Conv1D weight stored transposed)."""
    parts = {"norm1": ("ln_1", False), "attn.qkv": ("attn.c_attn", True), "attn.proj": ("attn.c_proj", True),
             "norm2": ("ln_2", False), "mlp.fc1": ("mlp.c_fc", True), "mlp.fc2": ("mlp.c_proj", True)}
    out = {}
    for ours, (theirs, conv) in parts.items():
        out[f"encoder.blocks.{i}.{ours}.weight"] = (f"transformer.h.{i}.{theirs}.weight", conv)
        out[f"encoder.blocks.{i}.{ours}.bias"] = (f"transformer.h.{i}.{theirs}.bias", False)
    return out


def _gpt2_map(n_layers: int) -> dict[str, tuple[str, bool]]:
    mapping = {"embedder.tokens.weight": ("transformer.wte.weight", False),
               "embedder.position.table.weight": ("transformer.wpe.weight", False),
               "encoder.norm.weight": ("transformer.ln_f.weight", False),
               "encoder.norm.bias": ("transformer.ln_f.bias", False),
               "head.weight": ("lm_head.weight", False)}
    for i in range(n_layers):
        mapping.update(_gpt2_keys(i))
    return mapping


# Llama-layout projections tokformer stacks into one matrix: ours -> their parts, in order.
_STACKED = {"attn.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            "mlp.fc1": ("mlp.gate_proj", "mlp.up_proj")}
_RENAMED = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "attn.proj": "self_attn.o_proj",
            "mlp.fc2": "mlp.down_proj"}


def state_from_hf(state: dict[str, Tensor], family: str, cfg) -> dict[str, Tensor]:
    """A Hugging Face state dict -> the state dict of the tokformer ``CausalLM`` of ``cfg``."""
    remaining = {k: v for k, v in state.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    out: dict[str, Tensor] = {}

    def take(key: str) -> Tensor:
        try:
            return remaining.pop(key)
        except KeyError:
            raise CheckpointError(f"{family} weights have no {key}") from None

    if family == "gpt2":
        remaining = {k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}": v
                     for k, v in remaining.items()}  # bare GPT2Model checkpoints lack the prefix
        for ours, (theirs, conv) in _gpt2_map(cfg.n_layers).items():
            if ours == "head.weight" and cfg.tie_embeddings:
                remaining.pop(theirs, None)
                continue
            value = take(theirs)
            out[ours] = value.t().contiguous() if conv else value
    else:
        out["embedder.tokens.weight"] = take("model.embed_tokens.weight")
        out["encoder.norm.weight"] = take("model.norm.weight")
        if cfg.tie_embeddings:
            remaining.pop("lm_head.weight", None)
        else:
            out["head.weight"] = take("lm_head.weight")
        for i in range(cfg.n_layers):
            theirs, ours = f"model.layers.{i}.", f"encoder.blocks.{i}."
            for part, hf_part in _RENAMED.items():
                for kind in ("weight", "bias"):
                    if f"{theirs}{hf_part}.{kind}" in remaining:
                        out[f"{ours}{part}.{kind}"] = take(f"{theirs}{hf_part}.{kind}")
            for part, hf_parts in _STACKED.items():
                for kind in ("weight", "bias"):
                    if f"{theirs}{hf_parts[0]}.{kind}" in remaining:
                        out[f"{ours}{part}.{kind}"] = torch.cat([take(f"{theirs}{p}.{kind}") for p in hf_parts])
        remaining = {k: v for k, v in remaining.items() if not k.endswith("rotary_emb.inv_freq")}
    if remaining:
        raise CheckpointError(f"{family} weights not understood: {', '.join(sorted(remaining)[:6])}")
    if cfg.tie_embeddings:
        out["head.weight"] = out["embedder.tokens.weight"]
    return out


def state_to_hf(state: dict[str, Tensor], family: str, cfg) -> dict[str, Tensor]:
    """The inverse of :func:`state_from_hf`: a tokformer ``CausalLM`` state dict -> Hugging Face's."""
    out: dict[str, Tensor] = {}
    if family == "gpt2":
        for ours, (theirs, conv) in _gpt2_map(cfg.n_layers).items():
            if ours in state:
                out[theirs] = state[ours].t().contiguous() if conv else state[ours]
        if cfg.tie_embeddings:
            out.pop("lm_head.weight", None)
        return out
    out["model.embed_tokens.weight"] = state["embedder.tokens.weight"]
    out["model.norm.weight"] = state["encoder.norm.weight"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = state["head.weight"]
    block = cfg.transformer()
    kv_width = block.kv_heads * block.d_head
    for i in range(cfg.n_layers):
        theirs, ours = f"model.layers.{i}.", f"encoder.blocks.{i}."
        for part, hf_part in _RENAMED.items():
            for kind in ("weight", "bias"):
                if f"{ours}{part}.{kind}" in state:
                    out[f"{theirs}{hf_part}.{kind}"] = state[f"{ours}{part}.{kind}"]
        for part, hf_parts in _STACKED.items():
            for kind in ("weight", "bias"):
                if f"{ours}{part}.{kind}" in state:
                    value = state[f"{ours}{part}.{kind}"]
                    sizes = [cfg.d_model, kv_width, kv_width] if part == "attn.qkv" else [value.shape[0] // 2] * 2
                    for hf_part, piece in zip(hf_parts, value.split(sizes), strict=True):
                        out[f"{theirs}{hf_part}.{kind}"] = piece.contiguous()
    return out


# -- folders -------------------------------------------------------------------------------


def load_hf_folder(folder: str | os.PathLike) -> tuple[Any, CausalLM]:
    """The ``lm`` task (config and tokenizer set) and the ``CausalLM`` of a local Hugging Face folder."""
    folder = Path(folder)
    hf = read_config(folder)
    try:
        cfg = lm_config_from_hf(hf)
    except ConfigError as err:  # the key's name alone does not say which file to fix
        raise ConfigError(f"{folder / 'config.json'}: {err}") from None
    tokenizer = load_tokenizer(folder, cfg.context_len)
    if tokenizer.vocab_size > cfg.embedding_rows:
        raise ConfigError(f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                          f"{cfg.embedding_rows} embedding rows")
    cfg = replace(cfg, vocab_size=tokenizer.vocab_size, **_special_tokens(folder, hf, tokenizer))
    task = get_task("lm")(cfg)
    task.tokenizer = tokenizer
    check_against_weights(planned_size(task.build_model), weight_files(folder), str(folder / "config.json"))
    model = task.build_model()
    state = state_from_hf(read_state(folder), hf["model_type"], cfg)
    load_fitting(model, state, f"Hugging Face weights {folder}", f"its config.json ({hf['model_type']})")
    return task, model.eval()


def _special_tokens(folder: Path, hf: dict[str, Any], tokenizer: Any) -> dict[str, str | None]:
    """``bos_token``: what the folder's tokenizer puts before a prompt (``add_bos_token``, or a
    special token ahead of ``$A`` in a TemplateProcessing post-processor, alone or in a Sequence
    as Llama 3 has it); ``eos_token``: the config's ``eos_token_id`` (the first one, when it lists
    several). Each only when it is one of the tokenizer's special tokens."""
    names = {i: name for name, i in tokenizer.special_tokens.items()}
    bos: str | None = None
    if _json_or_empty(folder / "tokenizer_config.json").get("add_bos_token"):
        bos = names.get(_first_id(hf.get("bos_token_id")))
    processor = _json_or_empty(folder / "tokenizer.json").get("post_processor")
    for template in _templates(processor):
        single = template.get("single")
        first = single[0] if isinstance(single, list) and single and isinstance(single[0], dict) else {}
        special = first.get("SpecialToken")
        if isinstance(special, dict) and special.get("id") in tokenizer.special_tokens:
            bos = special["id"]
    return {"bos_token": bos, "eos_token": names.get(_first_id(hf.get("eos_token_id")))}


def _first_id(value: Any) -> int | None:
    """A config's token id: an int, or the first of a list of them (anything else: none)."""
    value = value[0] if isinstance(value, list) and value else value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _templates(processor: Any) -> list[dict[str, Any]]:
    """The TemplateProcessing post-processors of a tokenizer.json, also inside a Sequence of them."""
    if not isinstance(processor, dict):
        return []
    if processor.get("type") == "Sequence" and isinstance(processor.get("processors"), list):
        return [p for p in processor["processors"] if isinstance(p, dict) and p.get("type") == "TemplateProcessing"]
    return [processor] if processor.get("type") == "TemplateProcessing" else []


def _json_or_empty(path: Path) -> dict[str, Any]:
    """The JSON object in an optional file of the folder, or {} where there is none to read: the file is
    missing, unreadable, not JSON (nested too deeply too) or not an object. read_json reads only a regular
    file: a pipe in its place is skipped, not waited on, and /dev/zero is not read without end."""
    try:
        document = read_json(path)
    except DataError:
        return {}
    return document if isinstance(document, dict) else {}


def save_hf_folder(task: Any, model: CausalLM, folder: str | os.PathLike, family: str | None = None) -> Path:
    """Write ``model`` (an ``lm`` task's) as a Hugging Face folder: config, safetensors weights, tokenizer.
    Another task, or a model that is not the task's, is refused before anything is written."""
    if not isinstance(task, Task) or name_of(task) != "lm":
        raise UsageError(f"save_hf_folder writes an lm model as a Hugging Face causal LM, not a "
                         f"{name_of(task) if isinstance(task, Task) else type(task).__name__!r} model; "
                         "use tokformer.save_pretrained")
    check_model_of(task, model, "save_hf_folder")
    cfg, tokenizer = task.config, task.tokenizer
    family = family or family_of(cfg)
    if family not in FAMILIES:
        raise ConfigError(f"unknown Hugging Face family {family!r}; choose one of {', '.join(FAMILIES)}")
    folder = Path(folder)
    check_free(folder)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with staged_folder(folder) as tmp:  # the folder appears whole or not at all
        save_file(state_to_hf(state, family, cfg), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config(cfg, family, tokenizer), indent=2) + "\n")
        tokenizer.save_hf_json(tmp / "tokenizer.json")
        tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.context_len,
                            "bos_token": cfg.bos_token, "eos_token": cfg.eos_token, "add_bos_token": False,
                            "add_eos_token": False}
        (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return folder
