"""Hugging Face interop where the mutation run of ``tokformer/interop/hf.py`` found no test looking.

The parity tests of ``test_hf_interop.py`` use full configs that transformers wrote, each option
at one value, and read back only what the tokformer side reads. These tests cover the rest of the
contract: a config.json that omits what transformers fills in by default, every older layout of
the rope settings, every option refused (by its exact one-line message: a test matching ``norm``
also matches a mutant that prints ``XXnormXX``), every activation a family can carry, the older
checkpoint layouts (GPT-2's attention buffers, bare ``GPT2Model`` weights, a tied head saved
anyway), and what transformers itself reads from the folders tokformer writes (config keys and
values, dropout, dtype, architectures, tokenizer settings, safetensors metadata).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from ascii_locale import run_under_ascii_locale
from hf_models import TEXT, outside_repo, save_reference, tokformer_logits, transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tokformer.errors import TokformerError
from tokformer.interop import hf
from tokformer.tasks.lm import LMConfig, LMTask, build_lm
from tokformer.tokenizers.bpe import BPETokenizer

TINY_GPT2 = dict(n_embd=16, n_head=2, n_layer=1, n_positions=24)
TINY_LLAMA = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1,
                  intermediate_size=24, max_position_embeddings=24)


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train([TEXT], 300, special_tokens=[hf.EOT])


def ids_of(tokenizer: BPETokenizer, text: str = "The quick brown fox jumps") -> torch.Tensor:
    return torch.tensor([tokenizer.encode(text)])


def assert_same_logits(ours: torch.nn.Module, reference: torch.nn.Module, ids: torch.Tensor) -> None:
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
    torch.testing.assert_close(tokformer_logits(ours, ids), expected, atol=1e-5, rtol=1e-5)
    assert expected.std() > 0.1  # random weights: logits far from flat


def reload_in_transformers(folder: Path, workdir: Path) -> torch.nn.Module:
    with outside_repo(workdir):
        return transformers.AutoModelForCausalLM.from_pretrained(folder).eval()


def lm_task(tokenizer: BPETokenizer, **options) -> tuple[LMTask, torch.nn.Module]:
    """A randomly initialised tokformer ``lm`` model (norms and biases randomised too)."""
    cfg = LMConfig(**{"d_model": 16, "n_heads": 2, "n_layers": 1, "context_len": 24, "vocab_size": 300,
                      "dropout": 0.0, **options})
    task = LMTask(cfg)
    task.tokenizer = tokenizer
    torch.manual_seed(0)
    model = build_lm(tokenizer, cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return task, model


def exported_config(task: LMTask, model: torch.nn.Module, folder: Path) -> dict:
    hf.save_hf_folder(task, model, folder)
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


# -- reading configs ---------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", hf.FAMILIES)
def test_defaults_are_those_of_transformers_config_classes(model_type) -> None:
    """(A key/value head count of None follows the attention heads, as Llama's does.)"""
    heads = {} if model_type == "gpt2" else {"num_attention_heads": 4}
    theirs = transformers.AutoConfig.for_model(model_type, **heads).to_dict()
    ours = {k: 4 if k == "num_key_value_heads" and v is None else v for k, v in hf.DEFAULTS[model_type].items()}
    assert {key: theirs[key] for key in ours} == ours


@pytest.mark.parametrize(("model_type", "required"), [
    ("gpt2", dict(vocab_size=300, **TINY_GPT2)),
    ("llama", dict(vocab_size=300, hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                   intermediate_size=24)),
    ("mistral", dict(vocab_size=300, hidden_size=64, num_attention_heads=8, num_hidden_layers=1,
                     intermediate_size=24)),  # 8 key/value heads and a 4,096-token window by default
    ("qwen2", dict(vocab_size=300, hidden_size=128, num_attention_heads=32, num_hidden_layers=1,
                   intermediate_size=24)),
])
def test_a_config_without_defaults_reads_like_the_one_transformers_completes(model_type, required) -> None:
    """What a config.json leaves out means transformers' default: the shortest file reads like the
    complete one transformers' config class makes of it (in both layouts of rope_theta)."""
    complete = transformers.AutoConfig.for_model(model_type, **required).to_dict()
    assert hf.lm_config_from_hf({"model_type": model_type, **required}) == hf.lm_config_from_hf(complete)
    if model_type != "gpt2":  # transformers < 5 wrote rope_theta at the top level
        legacy = {k: v for k, v in complete.items() if k != "rope_parameters"}
        legacy["rope_theta"] = complete["rope_parameters"]["rope_theta"]
        assert hf.lm_config_from_hf(legacy) == hf.lm_config_from_hf(complete)


@pytest.mark.parametrize(("model_type", "key", "field"), [("gpt2", "layer_norm_epsilon", "norm_eps"),
                                                            ("llama", "rms_norm_eps", "norm_eps"),
                                                            ("llama", "max_position_embeddings", "context_len")])
def test_values_other_than_the_defaults_are_read(model_type, key, field) -> None:
    base = dict(TINY_GPT2) if model_type == "gpt2" else dict(TINY_LLAMA)
    value = 40 if key == "max_position_embeddings" else 1e-3
    config = hf.lm_config_from_hf({"model_type": model_type, "vocab_size": 300, **base, key: value})
    assert getattr(config, field) == value


@pytest.mark.parametrize(("model_type", "options", "context"), [
    ("mistral", dict(sliding_window=16), 16),  # Mistral slides whenever it has a window
    ("mistral", dict(sliding_window=None), 64),
    ("mistral", dict(sliding_window=16, use_sliding_window=False), 64),
    ("qwen2", dict(sliding_window=16), 64),  # Qwen2 slides only when told to
    ("qwen2", dict(sliding_window=16, use_sliding_window=True), 16),
    ("llama", dict(), 64),
])
def test_context_is_the_sliding_window_only_where_the_family_slides(model_type, options, context) -> None:
    config = {"model_type": model_type, "vocab_size": 300, **TINY_LLAMA, "max_position_embeddings": 64, **options}
    assert hf.lm_config_from_hf(config).context_len == context


@pytest.mark.parametrize(("rope", "theta"), [
    ({}, 10000.0),
    ({"rope_theta": 5e5}, 5e5),
    ({"rope_theta": 5e5, "rope_scaling": None}, 5e5),
    ({"rope_theta": 3e3, "rope_scaling": {"rope_type": "default"}}, 3e3),
    ({"rope_theta": 3e3, "rope_scaling": {"type": "default"}}, 3e3),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 7e4}}, 7e4),
    ({"rope_parameters": {"rope_theta": 7e4}, "rope_theta": 5e5}, 7e4),  # the newer layout wins
])
def test_rope_theta_is_read_from_every_config_layout(rope, theta) -> None:
    assert hf.lm_config_from_hf({"model_type": "llama", "vocab_size": 300, **TINY_LLAMA, **rope}).rope_theta == theta


@pytest.mark.parametrize(("model_type", "rope", "kind"), [
    ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}}, "linear"),
    ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic"),
    ("qwen2", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "yarn"),
    ("mistral", {"rope_scaling": {"rope_type": "llama3", "type": "default", "factor": 8.0}}, "llama3"),
])
def test_rope_scaling_is_refused_by_name(model_type, rope, kind) -> None:
    config = {"model_type": model_type, "vocab_size": 300, **TINY_LLAMA, **rope}
    with pytest.raises(TokformerError) as info:
        hf.lm_config_from_hf(config)
    assert str(info.value) == (f"{model_type} option rope_type={kind!r} (rope scaling) cannot be represented "
                               "by tokformer")


REFUSED = [
    ("gpt2", "scale_attn_weights", False),
    ("gpt2", "scale_attn_by_inverse_layer_idx", True),
    ("gpt2", "add_cross_attention", True),
    ("gpt2", "activation_function", "gelu_10"),
    ("llama", "head_dim", 4),
    ("mistral", "hidden_act", "relu2"),
    ("qwen2", "qk_norm", True),
]


@pytest.mark.parametrize(("model_type", "option", "value"), REFUSED)
def test_options_tokformer_cannot_represent_are_refused_by_family_and_name(model_type, option, value) -> None:
    base = dict(TINY_GPT2) if model_type == "gpt2" else dict(TINY_LLAMA)
    config = {"model_type": model_type, "vocab_size": 300, **base, option: value}
    with pytest.raises(TokformerError) as info:
        hf.lm_config_from_hf(config)
    assert str(info.value) == f"{model_type} option {option}={value!r} cannot be represented by tokformer"


@pytest.mark.parametrize(("model_type", "option", "value"), [
    ("gpt2", "scale_attn_weights", True), ("gpt2", "scale_attn_by_inverse_layer_idx", False),
    ("gpt2", "add_cross_attention", False), ("gpt2", "activation_function", "gelu_fast"),
    ("llama", "head_dim", 8), ("llama", "head_dim", None), ("mistral", "hidden_act", "gelu"),
    ("qwen2", "qk_norm", False),
])
def test_the_same_options_at_representable_values_are_accepted(model_type, option, value) -> None:
    base = dict(TINY_GPT2) if model_type == "gpt2" else dict(TINY_LLAMA)
    hf.lm_config_from_hf({"model_type": model_type, "vocab_size": 300, **base, option: value})


# -- activations and biases, through both directions ------------------------------------------


@pytest.mark.parametrize("activation", ["gelu_new", "gelu", "gelu_pytorch_tanh", "silu", "swish", "quick_gelu"])
def test_every_gpt2_activation_loads_and_exports_with_the_same_logits(activation, tokenizer, tmp_path) -> None:
    ref = save_reference("gpt2", dict(TINY_GPT2, activation_function=activation), tmp_path / "ref", tokenizer)
    task, ours = hf.load_hf_folder(tmp_path / "ref")
    assert_same_logits(ours, ref, ids_of(tokenizer))
    hf.save_hf_folder(task, ours, tmp_path / "out")
    assert_same_logits(ours, reload_in_transformers(tmp_path / "out", tmp_path), ids_of(tokenizer))


@pytest.mark.parametrize(("model_type", "options"), [
    ("llama", dict(hidden_act="gelu")),  # GeGLU, exact GELU
    ("llama", dict(hidden_act="gelu_pytorch_tanh")),  # GeGLU, tanh GELU (Gemma's)
    ("qwen2", dict(attention_bias=True)),  # Qwen2 ignores attention_bias: q/k/v biases only
])
def test_llama_layout_variants_load_and_export_with_the_same_logits(model_type, options, tokenizer,
                                                                    tmp_path) -> None:
    ref = save_reference(model_type, dict(TINY_LLAMA, **options), tmp_path / "ref", tokenizer)
    task, ours = hf.load_hf_folder(tmp_path / "ref")
    assert_same_logits(ours, ref, ids_of(tokenizer))
    hf.save_hf_folder(task, ours, tmp_path / "out")
    assert_same_logits(ours, reload_in_transformers(tmp_path / "out", tmp_path), ids_of(tokenizer))


@pytest.mark.parametrize("options", [
    dict(activation="gelu"), dict(activation="silu"), dict(activation="quick_gelu"),
    dict(position="rope", norm="rms", mlp="geglu", activation="gelu", bias=False),
    dict(position="rope", norm="rms", mlp="geglu", activation="gelu_tanh", bias=False),
])
def test_tokformer_built_models_export_with_the_same_logits(options, tokenizer, tmp_path) -> None:
    task, model = lm_task(tokenizer, **options)
    hf.save_hf_folder(task, model, tmp_path / "out")
    assert_same_logits(model, reload_in_transformers(tmp_path / "out", tmp_path), ids_of(tokenizer))


NO_FAMILY = [
    (dict(qk_norm=True), "no Hugging Face causal-LM family has qk_norm"),
    (dict(layer_scale=0.1), "no Hugging Face causal-LM family has layer_scale"),
    (dict(norm="rms"), "a learned-position model exports as GPT-2, which needs its norm"),
    (dict(mlp="swiglu"), "a learned-position model exports as GPT-2, which needs its mlp"),
    (dict(out_bias=False), "a learned-position model exports as GPT-2, which needs its biases"),
    (dict(n_kv_heads=1), "a learned-position model exports as GPT-2, which needs its n_kv_heads"),
    (dict(position="none"), "no Hugging Face family matches this model's position "
                            "(GPT-2: learned positions; Llama: rope, rms, swiglu)"),
    (dict(position="rope"), "no Hugging Face family matches this model's norm "
                            "(GPT-2: learned positions; Llama: rope, rms, swiglu)"),
    (dict(position="rope", norm="rms"), "no Hugging Face family matches this model's mlp "
                                        "(GPT-2: learned positions; Llama: rope, rms, swiglu)"),
    (dict(position="rope", norm="rms", mlp="swiglu", bias=False, out_bias=True),
     "biases on the attention output only have no Hugging Face family"),
]


@pytest.mark.parametrize(("options", "message"), NO_FAMILY)
def test_models_no_family_represents_are_refused_with_the_reason(options, message, tokenizer, tmp_path) -> None:
    task, model = lm_task(tokenizer, **options)
    with pytest.raises(TokformerError) as info:
        hf.save_hf_folder(task, model, tmp_path / "out")
    assert str(info.value) == message
    assert not (tmp_path / "out").exists()


# -- older checkpoint layouts ---------------------------------------------------------------


def test_gpt2_attention_buffers_of_older_checkpoints_are_ignored(tokenizer, tmp_path) -> None:
    """transformers < 4.3x saved the causal mask (``attn.bias``) and ``attn.masked_bias`` buffers."""
    ref = save_reference("gpt2", TINY_GPT2, tmp_path, tokenizer)
    state = load_file(tmp_path / "model.safetensors")
    state["transformer.h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 24, 24))
    state["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert_same_logits(hf.load_hf_folder(tmp_path)[1], ref, ids_of(tokenizer))


def test_bare_gpt2model_weights_load_with_the_tied_head(tokenizer, tmp_path) -> None:
    """GPT2Model checkpoints (no ``transformer.`` prefix, no head) are GPT-2 with its tied head."""
    ref = save_reference("gpt2", TINY_GPT2, tmp_path, tokenizer)
    state = load_file(tmp_path / "model.safetensors")
    bare = {k.removeprefix("transformer."): v for k, v in state.items() if k != "lm_head.weight"}
    assert not any(k.startswith("transformer.") for k in bare)
    save_file(bare, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert_same_logits(hf.load_hf_folder(tmp_path)[1], ref, ids_of(tokenizer))


@pytest.mark.parametrize(("model_type", "options"), [("gpt2", TINY_GPT2),
                                                     ("llama", dict(TINY_LLAMA, tie_word_embeddings=True))])
def test_a_tied_head_saved_anyway_loads(model_type, options, tokenizer, tmp_path) -> None:
    """Checkpoints of a tied model that store ``lm_head.weight`` too (older saves did)."""
    ref = save_reference(model_type, options, tmp_path, tokenizer)
    state = load_file(tmp_path / "model.safetensors")
    embeddings = "transformer.wte.weight" if model_type == "gpt2" else "model.embed_tokens.weight"
    assert "lm_head.weight" not in state
    state["lm_head.weight"] = state[embeddings].clone()
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert_same_logits(hf.load_hf_folder(tmp_path)[1], ref, ids_of(tokenizer))


# -- what transformers reads from the folders tokformer writes ---------------------------------


@pytest.mark.parametrize(("options", "family", "legacy"), [
    (dict(activation="gelu_tanh"), "gpt2", {"torch_dtype"}),
    (dict(position="rope", norm="rms", mlp="swiglu", bias=False, n_kv_heads=1, rope_theta=5e5, tie_embeddings=False),
     "llama", {"torch_dtype", "rope_theta"}),
])
def test_exported_config_is_read_by_transformers_as_written(options, family, legacy, tokenizer, tmp_path) -> None:
    """Every key is one transformers' config class knows (or one older transformers reads), with the
    value written; dtype float32; the architecture is the class AutoModel builds; bos/eos ids are the
    tokenizer's; an older reader that knows only the top-level rope_theta reads the same theta."""
    task, model = lm_task(tokenizer, **options)
    written = exported_config(task, model, tmp_path / "out")
    assert written["model_type"] == family
    with outside_repo(tmp_path):
        config = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    known = transformers.AutoConfig.for_model(family).to_dict()
    assert set(written) - set(known) == legacy
    read = config.to_dict()
    for key, value in written.items():
        if key not in legacy:
            assert read[key] == value, key
    assert config.dtype == torch.float32
    eot = tokenizer.special_tokens[hf.EOT]
    assert (written["bos_token_id"], written["eos_token_id"]) == (eot, eot)
    reloaded = reload_in_transformers(tmp_path / "out", tmp_path)
    assert type(reloaded) is getattr(transformers, written["architectures"][0])
    if "rope_theta" in legacy:
        older = {k: v for k, v in written.items() if k != "rope_parameters"}
        assert hf.lm_config_from_hf(older).rope_theta == 5e5


@pytest.mark.parametrize("options", [dict(), dict(position="rope", norm="rms", mlp="swiglu", bias=False)])
def test_exported_models_have_no_dropout_in_transformers(options, tokenizer, tmp_path) -> None:
    """Training mode in transformers computes what evaluation mode does: every dropout written is 0."""
    task, model = lm_task(tokenizer, **options)
    hf.save_hf_folder(task, model, tmp_path / "out")
    reloaded = reload_in_transformers(tmp_path / "out", tmp_path)
    ids = ids_of(tokenizer)
    with torch.no_grad():
        evaluated = reloaded(input_ids=ids).logits
        torch.manual_seed(1)
        trained = reloaded.train()(input_ids=ids).logits
    assert torch.equal(trained, evaluated)


def test_exported_weights_carry_the_metadata_transformers_writes(tokenizer, tmp_path) -> None:
    """transformers 4 refuses a safetensors file whose ``format`` is not one it knows; ours says
    what ``save_pretrained`` says."""
    save_reference("gpt2", TINY_GPT2, tmp_path / "ref", tokenizer)
    task, model = hf.load_hf_folder(tmp_path / "ref")
    hf.save_hf_folder(task, model, tmp_path / "out")
    with safe_open(tmp_path / "out" / "model.safetensors", "pt") as ours, \
            safe_open(tmp_path / "ref" / "model.safetensors", "pt") as theirs:
        assert ours.metadata() == theirs.metadata() == {"format": "pt"}


def test_exported_tokenizer_settings_are_what_transformers_reads(tokenizer, tmp_path) -> None:
    """``tokenizer_config.json``: the class transformers 4's AutoTokenizer builds, the context, the
    special tokens, and no BOS/EOS added by transformers (tokformer's lm adds its own BOS)."""
    task, model = lm_task(tokenizer, context_len=20)
    hf.save_hf_folder(task, model, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert written == {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 20, "bos_token": hf.EOT,
                       "eos_token": hf.EOT, "add_bos_token": False, "add_eos_token": False}
    with outside_repo(tmp_path):
        loaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert (loaded.model_max_length, loaded.bos_token, loaded.eos_token) == (20, hf.EOT, hf.EOT)
    assert loaded("The quick brown fox")["input_ids"] == tokenizer.encode("The quick brown fox")


# -- reading folders: files, names, budgets ----------------------------------------------------


@pytest.fixture
def llama_folder(tokenizer, tmp_path) -> Path:
    """A tiny random Llama folder with tokformer's tokenizer (300 tokens, 320 embedding rows)."""
    save_reference("llama", TINY_LLAMA, tmp_path / "llama", tokenizer)
    return tmp_path / "llama"


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **changes}), encoding="utf-8")


def error_of(folder: Path) -> str:
    with pytest.raises(TokformerError) as info:
        hf.load_hf_folder(folder)
    return str(info.value)


def test_a_config_that_is_not_an_object_is_refused(llama_folder) -> None:
    (llama_folder / "config.json").write_text('["model_type"]', encoding="utf-8")
    assert error_of(llama_folder) == f"{llama_folder / 'config.json'}: no model_type (not a Hugging Face model config)"


def test_weights_are_read_as_float32_and_integers_stay_integers(llama_folder) -> None:
    state = load_file(llama_folder / "model.safetensors")
    half = {k: v.half() for k, v in state.items()} | {"model.position_ids": torch.arange(5)}
    save_file(half, llama_folder / "model.safetensors")
    read = hf.read_state(llama_folder)
    assert read["model.position_ids"].dtype == torch.int64
    assert {v.dtype for k, v in read.items() if k != "model.position_ids"} == {torch.float32}


def test_an_index_naming_a_shard_outside_the_folder_is_refused(llama_folder) -> None:
    index = llama_folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": "../elsewhere.safetensors"}}), encoding="utf-8")
    assert error_of(llama_folder).startswith(f"{index}: weight_map: ")


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "model.pth"])
def test_every_pickle_name_is_refused_with_how_to_convert(name, llama_folder) -> None:
    (llama_folder / "model.safetensors").rename(llama_folder / name)
    assert error_of(llama_folder).startswith(f"{llama_folder / name} is a pickle, which tokformer never loads")


def test_the_tokenizer_gets_the_context_as_its_length(llama_folder, tokenizer) -> None:
    assert hf.load_tokenizer(llama_folder, 17).max_length == 17
    (llama_folder / "tokenizer.json").unlink()
    tokenizer.save_vocab_merges(llama_folder)
    assert hf.load_tokenizer(llama_folder, 19).max_length == 19


def test_vocab_json_without_merges_is_no_tokenizer(llama_folder, tokenizer) -> None:
    (llama_folder / "tokenizer.json").unlink()
    tokenizer.save_vocab_merges(llama_folder)
    (llama_folder / "merges.txt").unlink()
    assert error_of(llama_folder) == (f"{llama_folder}: no tokenizer.json or vocab.json + merges.txt (a byte-level "
                                      "BPE tokenizer is needed)")


def test_gpt2_files_without_endoftext_load_without_specials(llama_folder) -> None:
    plain = BPETokenizer.train([TEXT], 300)
    (llama_folder / "tokenizer.json").unlink()
    plain.save_vocab_merges(llama_folder)
    assert hf.load_tokenizer(llama_folder, 24).special_tokens == {}


def test_a_loaded_config_is_the_checkpoint_s_with_the_tokenizer_s_vocabulary(llama_folder, tokenizer) -> None:
    """No training data, no dropout; vocab_size is the tokenizer's, embedding_rows the checkpoint's."""
    task, model = hf.load_hf_folder(llama_folder)
    cfg = task.config
    assert (cfg.data, cfg.dropout, cfg.vocab_size, cfg.embedding_rows) == ("", 0.0, tokenizer.vocab_size, 320)
    assert hf.lm_config_from_hf(json.loads((llama_folder / "config.json").read_text())).vocab_size == 320
    ids = ids_of(tokenizer)
    torch.testing.assert_close(tokformer_logits(model.train(), ids), tokformer_logits(model.eval(), ids),
                               rtol=0, atol=0)


def test_a_vocabulary_as_large_as_the_embedding_table_loads(tokenizer, tmp_path) -> None:
    ref = save_reference("llama", dict(TINY_LLAMA, vocab_size=tokenizer.vocab_size), tmp_path, tokenizer)
    assert_same_logits(hf.load_hf_folder(tmp_path)[1], ref, ids_of(tokenizer))


def test_a_config_far_larger_than_its_weights_is_refused_before_building(llama_folder, monkeypatch) -> None:
    """A few bytes of config.json must not buy a model of billions of parameters: it is sized on the
    meta device and refused; building it for real here would be a bug (and 20 GB)."""
    from tokformer.runtime.registry import get_task

    lm = get_task("lm")
    real = lm.build_model

    def only_on_meta(self):
        assert torch.empty(0).device.type == "meta", "a model its weights cannot hold was built for real"
        return real(self)

    monkeypatch.setattr(lm, "build_model", only_on_meta)
    edit_json(llama_folder / "config.json", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
              num_attention_heads=64, num_key_value_heads=8, head_dim=128)
    message = error_of(llama_folder)
    assert message.startswith(f"{llama_folder / 'config.json'} describes a model of ")
    assert message.endswith("the config does not match its weights (damaged or edited)")


def test_weights_that_do_not_fit_name_the_folder_and_the_config(llama_folder) -> None:
    edit_json(llama_folder / "config.json", num_hidden_layers=2)
    assert error_of(llama_folder).startswith(f"Hugging Face weights {llama_folder} does not fit the model built "
                                             "from its config.json (llama) (missing: encoder.blocks.1.")


# -- checkpoint keys ---------------------------------------------------------------------------


def add_tensors(folder: Path, **tensors: torch.Tensor) -> None:
    state = load_file(folder / "model.safetensors")
    save_file(state | tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_rotary_frequencies_of_older_llama_checkpoints_are_ignored(llama_folder, tokenizer) -> None:
    add_tensors(llama_folder, **{"model.layers.0.self_attn.rotary_emb.inv_freq": torch.rand(4)})
    hf.load_hf_folder(llama_folder)


def test_weights_nobody_reads_are_named(llama_folder) -> None:
    add_tensors(llama_folder, **{"model.layers.0.self_attn.extra.weight": torch.rand(4)})
    assert error_of(llama_folder) == "llama weights not understood: model.layers.0.self_attn.extra.weight"


def test_a_stacked_projection_missing_a_part_names_it(llama_folder) -> None:
    """A bias on q_proj only: the k_proj bias tokformer's stacked qkv needs is named as missing."""
    add_tensors(llama_folder, **{"model.layers.0.self_attn.q_proj.bias": torch.rand(16)})
    assert error_of(llama_folder) == "llama weights have no model.layers.0.self_attn.k_proj.bias"


# -- special tokens --------------------------------------------------------------------------


@pytest.mark.parametrize(("eos", "expected"), [(None, None), ("eot", hf.EOT), (["eot", 5], hf.EOT), ([], None),
                                               (5, None), ({"id": 1}, None), ("</s>", None)])
def test_eos_is_the_config_s_first_eos_id_that_is_a_special_token(eos, expected, llama_folder, tokenizer) -> None:
    eot = tokenizer.special_tokens[hf.EOT]
    value = eot if eos == "eot" else ([eot if e == "eot" else e for e in eos] if isinstance(eos, list) else eos)
    edit_json(llama_folder / "config.json", eos_token_id=value)
    assert hf.load_hf_folder(llama_folder)[0].config.eos_token == expected


@pytest.mark.parametrize(("add_bos", "bos_id", "expected"), [
    (True, "eot", hf.EOT), (True, ["eot"], hf.EOT), (False, "eot", None), (True, 5, None), (None, "eot", None)])
def test_bos_is_added_where_tokenizer_config_adds_a_special_bos(add_bos, bos_id, expected, llama_folder,
                                                                 tokenizer) -> None:
    eot = tokenizer.special_tokens[hf.EOT]
    bos_id = eot if bos_id == "eot" else ([eot] if bos_id == ["eot"] else bos_id)
    edit_json(llama_folder / "config.json", bos_token_id=bos_id)
    options = {} if add_bos is None else {"add_bos_token": add_bos}
    (llama_folder / "tokenizer_config.json").write_text(json.dumps(options), encoding="utf-8")
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token == expected


BOS_FIRST = [{"SpecialToken": {"id": hf.EOT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]


@pytest.mark.parametrize(("document", "expected"), [
    ({"type": "TemplateProcessing", "single": BOS_FIRST}, hf.EOT),
    ({"type": "TemplateProcessing", "single": BOS_FIRST[1:]}, None),
    ({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}]}, None),  # unknown
    ({"type": "BertProcessing", "single": BOS_FIRST}, None),
    ({"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": False},
                                         {"type": "TemplateProcessing", "single": BOS_FIRST}]}, hf.EOT),  # Llama 3
    ({"type": "TemplateProcessing", "single": BOS_FIRST, "processors": []}, hf.EOT),  # its type decides
    ({"type": "Sequence", "processors": [{"type": "BertProcessing", "single": BOS_FIRST}]}, None),
    ({"type": "TemplateProcessing", "single": "$A"}, None),
    ({"type": "TemplateProcessing", "single": ["SpecialToken"]}, None),
    ({"type": "Sequence", "processors": {"type": "TemplateProcessing"}}, None),
    (None, None),
    ("TemplateProcessing", None),
])
def test_bos_is_the_special_token_a_template_puts_first(document, expected, llama_folder) -> None:
    tokenizer_json = llama_folder / "tokenizer.json"
    edit_json(tokenizer_json, post_processor=document)
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token == expected


def test_a_tokenizer_config_that_is_not_an_object_is_ignored(llama_folder) -> None:
    (llama_folder / "tokenizer_config.json").write_text("[]", encoding="utf-8")
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token is None


def test_a_tokenizer_config_nested_too_deeply_is_ignored_as_other_malformed_json_is(llama_folder) -> None:
    """files.loads raises a plain ValueError for it, which was not caught: an internal error, exit 1."""
    (llama_folder / "tokenizer_config.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000, encoding="utf-8")
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token is None


def test_optional_tokenizer_files_that_are_pipes_are_ignored_not_waited_on(llama_folder, tokenizer,
                                                                           named_pipe) -> None:
    """tokenizer_config.json, and a tokenizer.json beside the vocab.json + merges.txt the tokenizer is read
    from, are read only for the BOS token: a pipe in their place blocked the load forever."""
    named_pipe(llama_folder / "tokenizer_config.json")
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token is None
    (llama_folder / "tokenizer.json").unlink()
    tokenizer.save_vocab_merges(llama_folder)
    named_pipe(llama_folder / "tokenizer.json")
    assert hf.load_hf_folder(llama_folder)[0].tokenizer.vocab_size == tokenizer.vocab_size


def test_a_vocab_json_that_is_not_an_object_is_refused_by_name(llama_folder, tokenizer) -> None:
    (llama_folder / "tokenizer.json").unlink()
    vocab, _ = tokenizer.save_vocab_merges(llama_folder)
    vocab.write_text("3", encoding="utf-8")  # `EOT in 3` raised a TypeError: an internal error
    assert error_of(llama_folder) == (f"{llama_folder}: tokenizer not supported: corrupt vocab file {vocab}: "
                                      "expected a JSON object of token -> id")


def test_a_llama3_style_template_adds_the_bos_transformers_adds(llama_folder, tokenizer, tmp_path) -> None:
    """Llama 3's tokenizer.json: a Sequence of ByteLevel and a template that puts the BOS first."""
    eot = tokenizer.special_tokens[hf.EOT]
    edit_json(llama_folder / "tokenizer.json", post_processor={
        "type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing", "single": BOS_FIRST, "pair": BOS_FIRST + BOS_FIRST[1:],
             "special_tokens": {hf.EOT: {"id": hf.EOT, "ids": [eot], "tokens": [hf.EOT]}}}]})
    with outside_repo(tmp_path):
        theirs = transformers.AutoTokenizer.from_pretrained(llama_folder)("lazy dog")["input_ids"]
    assert theirs == [eot, *tokenizer.encode("lazy dog")]
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token == hf.EOT


def test_an_untied_gpt2_without_its_head_names_it(tokenizer, tmp_path) -> None:
    save_reference("gpt2", dict(TINY_GPT2, tie_word_embeddings=False), tmp_path, tokenizer)
    state = load_file(tmp_path / "model.safetensors")
    del state["lm_head.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert error_of(tmp_path) == "gpt2 weights have no lm_head.weight"


def test_tokenizer_files_are_read_as_utf8_under_an_ascii_locale(llama_folder) -> None:
    """transformers writes tokenizer.json in UTF-8 (tokens as themselves: ``Ġthe``); a machine whose
    default encoding is ASCII must still find the BOS its template adds."""
    tokenizer_json = llama_folder / "tokenizer.json"
    document = json.loads(tokenizer_json.read_text(encoding="utf-8")) | {
        "post_processor": {"type": "TemplateProcessing", "single": BOS_FIRST}}
    tokenizer_json.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    assert not tokenizer_json.read_bytes().isascii()
    assert hf.load_hf_folder(llama_folder)[0].config.bos_token == hf.EOT  # here, under a UTF-8 locale
    run = run_under_ascii_locale(textwrap.dedent(f"""
        import sys
        from tokformer.interop import hf
        sys.stdout.write(repr(hf.load_hf_folder({str(llama_folder)!r})[0].config.bos_token))
        """))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == repr(hf.EOT)


@pytest.mark.parametrize(("options", "family", "expected"), [
    (dict(position="rope", norm="rms", mlp="swiglu", bias=False, qkv_bias=True), None, "qwen2"),
    (dict(position="rope", norm="rms", mlp="swiglu", bias=False), "mistral", "mistral"),
])
def test_every_llama_layout_family_names_the_class_transformers_builds(options, family, expected, tokenizer,
                                                                       tmp_path) -> None:
    task, model = lm_task(tokenizer, **options)
    hf.save_hf_folder(task, model, tmp_path / "out", family=family)
    written = json.loads((tmp_path / "out" / "config.json").read_text(encoding="utf-8"))
    assert written["model_type"] == expected
    reloaded = reload_in_transformers(tmp_path / "out", tmp_path)
    assert type(reloaded) is getattr(transformers, written["architectures"][0])
    assert_same_logits(model, reloaded, ids_of(tokenizer))
