"""A Hugging Face config.json whose sizes, epsilons, rope settings or switches are null, of the wrong
type or out of range: one line naming the key and the file (exit 2), as a zero size already was.

Before, int() and float() took them as far as they could: null was a TypeError, 1e30 positions an
overflow in torch.empty (exit 1, "internal error"), 1e300 a context printed with 300 digits, a
negative epsilon NaN logits blamed on the weights, and "no" a true switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hf_models import TEXT, save_reference

from tokformer.cli import main
from tokformer.errors import ConfigError
from tokformer.interop import hf
from tokformer.tokenizers.bpe import BPETokenizer

TINY = {"gpt2": dict(n_embd=16, n_head=2, n_layer=1, n_positions=24),
        "llama": dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1,
                      intermediate_size=24, max_position_embeddings=24)}
WHOLE = "must be a whole number from 1 to 2147483647, got"
POSITIVE = "must be a positive finite number, got"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random GPT-2 and Llama folder, built once; each test edits a copy of their config.json."""
    tokenizer = BPETokenizer.train([TEXT], 300, special_tokens=[hf.EOT])
    root = tmp_path_factory.mktemp("hf")
    for family, options in TINY.items():
        save_reference(family, options, root / family, tokenizer)
    return {family: root / family for family in TINY}


def edited(folders: dict[str, Path], family: str, tmp_path: Path, **changes) -> Path:
    """A folder of ``family`` whose config.json has ``changes``; the weights are linked, not copied."""
    folder = tmp_path / family
    folder.mkdir()
    for file in folders[family].iterdir():
        (folder / file.name).symlink_to(file)
    config = json.loads((folders[family] / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, **changes}), encoding="utf-8")
    return folder


CASES = [
    ("gpt2", "vocab_size", None, f"vocab_size {WHOLE} None"),
    ("gpt2", "n_embd", 16.5, f"n_embd {WHOLE} 16.5"),
    ("gpt2", "n_head", True, f"n_head {WHOLE} True"),
    ("gpt2", "n_positions", 1e30, f"n_positions {WHOLE} 1e+30"),
    ("gpt2", "n_inner", "64", f"n_inner {WHOLE} '64'"),
    ("gpt2", "layer_norm_epsilon", None, f"layer_norm_epsilon {POSITIVE} None"),
    ("gpt2", "layer_norm_epsilon", -1e-5, f"layer_norm_epsilon {POSITIVE} -1e-05"),
    ("gpt2", "tie_word_embeddings", "no", "tie_word_embeddings must be true or false, got 'no'"),
    ("llama", "hidden_size", None, f"hidden_size {WHOLE} None"),
    ("llama", "intermediate_size", None, f"intermediate_size {WHOLE} None"),
    ("llama", "max_position_embeddings", None, f"max_position_embeddings {WHOLE} None"),
    ("llama", "max_position_embeddings", 1e300, f"max_position_embeddings {WHOLE} 1e+300"),
    ("llama", "num_key_value_heads", 0, f"num_key_value_heads {WHOLE} 0"),
    ("llama", "rms_norm_eps", None, f"rms_norm_eps {POSITIVE} None"),
    ("llama", "rms_norm_eps", -1e-6, f"rms_norm_eps {POSITIVE} -1e-06"),
    ("llama", "rope_parameters", {"rope_type": "default", "rope_theta": None}, f"rope_theta {POSITIVE} None"),
    ("llama", "rope_parameters", 3, "rope_parameters must be an object or null, got 3"),
    ("llama", "attention_bias", "no", "attention_bias must be true or false, got 'no'"),
    # switches tokformer represents one way only: "false" was read as true (scaled attention accepted)
    ("gpt2", "scale_attn_weights", "false", "scale_attn_weights must be true or false, got 'false'"),
    ("gpt2", "add_cross_attention", 0, "add_cross_attention must be true or false, got 0"),
    ("llama", "qk_norm", "off", "qk_norm must be true or false, got 'off'"),
    ("llama", "use_sliding_window", "false", "use_sliding_window must be true or false, got 'false'"),
    ("llama", "sliding_window", "8", f"sliding_window {WHOLE} '8'"),
    ("llama", "head_dim", "8", f"head_dim {WHOLE} '8'"),
]


@pytest.mark.parametrize(("family", "key", "value", "message"), CASES,
                         ids=[f"{family}-{key}={value}" for family, key, value, _ in CASES])
def test_a_bad_config_value_is_refused_naming_the_key_and_the_file(folders, tmp_path, family, key, value,
                                                                   message) -> None:
    folder = edited(folders, family, tmp_path, **{key: value})
    with pytest.raises(ConfigError) as info:
        hf.load_hf_folder(folder)
    assert str(info.value) == f"{folder / 'config.json'}: {family} config: {message}"


@pytest.mark.parametrize(("family", "key", "value"), [("gpt2", "vocab_size", None), ("gpt2", "n_positions", 1e30),
                                                      ("llama", "rope_parameters", 3)])
def test_generate_with_a_bad_config_value_is_one_line_exit_2(folders, tmp_path, family, key, value) -> None:
    folder = edited(folders, family, tmp_path, **{key: value})
    result = CliRunner().invoke(main, ["generate", str(folder), "-p", "hello", "-n", "2", "-t", "0"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {folder / 'config.json'}: {family} config: {key}")
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(("family", "changes"), [
    ("gpt2", {"n_inner": None, "n_embd": 16.0}),  # null: the family's default (4 * n_embd); a whole float
    ("llama", {"attention_bias": None, "rope_parameters": None, "rope_theta": 5e5}),
])
def test_nulls_that_mean_the_default_and_whole_floats_still_load(folders, tmp_path, family, changes) -> None:
    task, _ = hf.load_hf_folder(edited(folders, family, tmp_path, **changes))
    assert task.config.n_layers == 1


@pytest.mark.parametrize(("changes", "context"), [
    ({"sliding_window": 8}, 8),  # Mistral's way: a window is on whenever it is set
    ({"sliding_window": 8, "use_sliding_window": True}, 8),
    ({"sliding_window": 8, "use_sliding_window": False}, 24),  # Qwen2's switch, off
    ({"sliding_window": 8, "use_sliding_window": None}, 24),  # null: off, as transformers reads it
    ({"sliding_window": None}, 24),
    ({"head_dim": 8.0, "qk_norm": False}, 24),  # hidden_size / heads, and the switch off: representable
])
def test_a_sliding_window_caps_the_context_only_where_it_is_on(folders, tmp_path, changes, context) -> None:
    task, _ = hf.load_hf_folder(edited(folders, "llama", tmp_path, **changes))
    assert task.config.context_len == context


@pytest.mark.parametrize(("family", "key", "value"), [("gpt2", "scale_attn_weights", False),
                                                      ("gpt2", "scale_attn_by_inverse_layer_idx", True),
                                                      ("llama", "qk_norm", True), ("llama", "head_dim", 16)])
def test_a_well_typed_option_tokformer_cannot_represent_is_refused_by_name(folders, tmp_path, family, key,
                                                                          value) -> None:
    with pytest.raises(ConfigError, match=f"{family} option {key}={value!r} cannot be represented by tokformer"):
        hf.load_hf_folder(edited(folders, family, tmp_path, **{key: value}))
