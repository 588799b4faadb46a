"""Random ``transformers`` causal LMs saved as real Hugging Face folders: the references of the
interop tests (``test_hf_interop.py``, ``test_mutation_hf.py``). Built offline, every weight
randomised (a norm left at 1 or a bias at 0 would hide a mix-up of the two)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tokformer.batch import TokenBatch
from tokformer.tokenizers.bpe import BPETokenizer

transformers = pytest.importorskip("transformers")

TEXT = ("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
        "Über den Wolken muss die Freiheit wohl grenzenlos sein.\n") * 20
VOCAB_ROWS = 320  # more rows than the 300-token tokenizer: checkpoints pad their tables

FAMILIES = {
    # name: (model_type, config overrides)
    "gpt2": ("gpt2", dict(n_embd=48, n_head=4, n_layer=2, n_positions=64, n_inner=80, tie_word_embeddings=True)),
    "gpt2-untied-relu": ("gpt2", dict(n_embd=32, n_head=2, n_layer=1, n_positions=40, activation_function="relu",
                                      tie_word_embeddings=False)),
    "llama-gqa": ("llama", dict(hidden_size=48, intermediate_size=72, num_hidden_layers=2, num_attention_heads=6,
                                num_key_value_heads=2, rope_theta=5000.0, max_position_embeddings=64,
                                tie_word_embeddings=False)),
    "llama-mqa-tied-bias": ("llama", dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=1, attention_bias=True,
                                          mlp_bias=True, tie_word_embeddings=True, max_position_embeddings=64)),
    "qwen2": ("qwen2", dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, rope_theta=1e6, max_position_embeddings=64,
                            tie_word_embeddings=True)),
    "mistral": ("mistral", dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=8, sliding_window=4096, max_position_embeddings=64,
                                tie_word_embeddings=False)),
}


def randomise(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = 1.0 if "norm" in name or "ln_" in name else 0.0
            p.copy_(base + torch.randn(p.shape, generator=g) * (0.2 if base else 0.1))


def save_reference(model_type: str, overrides: dict, folder: Path, tokenizer: BPETokenizer,
                   seed: int = 0) -> torch.nn.Module:
    """A random ``transformers`` model of ``model_type`` saved in ``folder`` with ``tokenizer``."""
    config = transformers.AutoConfig.for_model(model_type, **{"vocab_size": VOCAB_ROWS, "eos_token_id": None,
                                                              "bos_token_id": None, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    randomise(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_hf_json(folder / "tokenizer.json")
    return model


def build_reference(kind: str, folder: Path, tokenizer: BPETokenizer, seed: int = 0) -> torch.nn.Module:
    """The reference model of :data:`FAMILIES` entry ``kind``, saved in ``folder``."""
    model_type, overrides = FAMILIES[kind]
    return save_reference(model_type, overrides, folder, tokenizer, seed)


def tokformer_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """A tokformer ``CausalLM``'s logits for unpadded rows of ``ids`` (batch, seq)."""
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    with torch.no_grad():
        return model(TokenBatch(mask=torch.ones_like(ids, dtype=torch.bool), ids=ids, positions=positions))


@contextlib.contextmanager
def outside_repo(folder: Path) -> Iterator[None]:
    """Work in ``folder``: the repo's own ``tokenizers/`` must not shadow Hugging Face's package."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
