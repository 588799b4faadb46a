"""What the vision-language core promises beyond its outputs on one CPU in float32 (mutation testing,
benchmarks/results/mutation.md): the type table's scale, a segment's dtype, the tied head without a
bias, the text embedder's check, and the prefix-LM mask built on the tokens' device."""

from __future__ import annotations

import pytest
import test_vision_language
import torch
from test_vision_language import build, inputs
from torch import nn

import tokformer.vision_language as vision_language
from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.segments import SegmentEmbedder
from tokformer.vision_language import VisionLanguageModel

D = 16
tokenizers = test_vision_language.tokenizers  # the same module-scoped fixture


class Features(nn.Module):
    """An embedder that returns its batch's features in a dtype of its own."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        return batch.features.to(self.dtype)


def test_type_embeddings_start_at_gpt2_scale() -> None:
    """N(0, 0.02), as the docstring says: small next to the token embeddings, so a fresh model sees its
    tokens first (nn.Embedding's own default is N(0, 1))."""
    embedder = SegmentEmbedder({name: nn.Identity() for name in ("image", "prompt", "answer")}, 512)
    table = embedder.types.weight.detach()  # [3, 512]: 1,536 draws
    assert float(table.std()) == pytest.approx(0.02, rel=0.1)
    assert abs(float(table.mean())) < 0.005


def test_a_segment_keeps_its_embedders_dtype() -> None:
    """The float32 type table is cast to the segment's dtype, not the segment promoted to float32 (a
    bfloat16 image embedder under a float32 table would otherwise double its activations' memory)."""
    embedder = SegmentEmbedder({"image": Features(torch.bfloat16)}, 4)
    batch = TokenBatch(features=torch.randn(2, 3, 4), mask=torch.ones(2, 3, dtype=torch.bool),
                       positions=torch.zeros(2, 3, dtype=torch.long))
    x = embedder.embed("image", batch)  # [2, 3, 4]
    assert x.dtype == torch.bfloat16
    expected = batch.features.to(torch.bfloat16) + embedder.types.weight[0].to(torch.bfloat16)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def test_the_head_is_the_text_table_and_has_no_bias(tokenizers) -> None:
    model = build(tokenizers)
    assert model.head.bias is None, "the tied head adds no parameter (GPT-2's layout)"
    image, prompt, answer = inputs(tokenizers, ["how many birds?", "is it a bird?"], ["three", "yes"])
    mixed = model.segments({"image": image, "prompt": prompt, "answer": answer})
    logits = model(image, prompt, answer)  # [B, Na, V]
    table = model.segments.embedders["answer"].tokens.weight  # [V, d]
    hidden = model.encoder(mixed.x, mixed.mask, attn_mask=vision_language.prefix_lm_mask(
        mixed.end_of("prompt"), mixed.x.shape[1]))[:, mixed.spans["answer"]]
    torch.testing.assert_close(logits, hidden @ table.T)


@pytest.mark.parametrize("fault", ["no table", "wrong width"])
def test_a_text_embedder_without_a_table_of_width_d_model_is_refused(tokenizers, fault: str) -> None:
    image_tok, text_tok = tokenizers
    text = Features(torch.float32) if fault == "no table" else text_tok.build_embedder(D + 1)
    with pytest.raises(ValueError, match="id table"):
        VisionLanguageModel(image_tok.build_embedder(D), text, TransformerConfig(d_model=D, n_heads=2, n_layers=1))


def test_the_prefix_lm_mask_is_built_on_the_tokens_device(tokenizers, monkeypatch) -> None:
    """A spy stands in for a GPU: the meta device cannot run the text embedder (its position check
    reads a value), so the call is checked for the tokens' device instead."""
    asked: list[torch.device | None] = []
    original = vision_language.prefix_lm_mask

    def spy(prefix_len, n, device=None):
        asked.append(device)
        return original(prefix_len, n, device)

    monkeypatch.setattr(vision_language, "prefix_lm_mask", spy)
    model = build(tokenizers)
    model(*inputs(tokenizers, ["how many birds?"], ["three"]))
    assert asked == [torch.device("cpu")]


def test_a_stack_with_registers_is_refused(tokenizers) -> None:
    """Registers are global tokens under an explicit mask: in a prefix-LM they would let an answer token
    read the tokens after it (through a register, one layer later), so teacher forcing would cheat."""
    image_tok, text_tok = tokenizers
    with pytest.raises(ValueError, match="n_registers=0"):
        VisionLanguageModel(image_tok.build_embedder(D), text_tok.build_embedder(D),
                            TransformerConfig(d_model=D, n_heads=2, n_layers=2, n_registers=1))
