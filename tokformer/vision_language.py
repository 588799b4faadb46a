"""Image + prompt -> answer: one Transformer over image tokens and text tokens (PaliGemma's layout).

The sequence is the image's tokens (any image tokenizer: patches with 2-D positions), the
prompt's and the answer's text tokens, each segment typed (:class:`~tokformer.segments.SegmentEmbedder`).
Attention is bidirectional over image + prompt and causal over the answer
(:func:`~tokformer.masks.prefix_lm_mask`), so the image is read in the light of the question and
the answer is generated token by token. The answer starts with a BOS token; the logits at answer
token ``t`` predict token ``t + 1`` (the last one EOS), and only those are trained.

Decoding runs the prefix through the model once, filling the KV caches, then one token at a time:
the same function as the training forward pass (tested), at O(1) work per new token per layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.kv_cache import KVCache, make_caches
from tokformer.masks import prefix_lm_mask
from tokformer.sampling import SamplingConfig, sample_next
from tokformer.segments import SegmentEmbedder
from tokformer.transformer import Encoder

SEGMENTS = ("image", "prompt", "answer")


class VisionLanguageModel(nn.Module):
    """Image tokens, then prompt tokens, then answer tokens, in one encoder stack.

    Args:
        image_embedder: embeds the image tokenizer's batches (``build_embedder(d_model)``).
        text_embedder: embeds text ids with positions; the prompt and the answer share it (one
            vocabulary, one table), and the output head is tied to its table.
        cfg: the Transformer stack.
    """

    def __init__(self, image_embedder: nn.Module, text_embedder: nn.Module, cfg: TransformerConfig) -> None:
        super().__init__()
        table = getattr(text_embedder, "tokens", None)
        if not isinstance(table, nn.Embedding) or table.embedding_dim != cfg.d_model:
            raise ValueError("the text embedder needs an id table (tokens) of width d_model, for the tied head")
        if cfg.n_registers:  # the encoder's registers are global tokens under an explicit mask
            raise ValueError("register tokens see every token: under the prefix-LM mask they would carry each "
                             "answer token back to the ones before it; build the stack with n_registers=0")
        self.segments = SegmentEmbedder({"image": image_embedder, "prompt": text_embedder,
                                         "answer": text_embedder}, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, table.num_embeddings, bias=False)
        self.head.weight = table.weight

    def forward(self, image: TokenBatch, prompt: TokenBatch, answer: TokenBatch) -> Tensor:
        """Logits ``[B, Na, V]`` at the answer's tokens (teacher forcing: ``answer`` starts with BOS)."""
        mixed = self.segments({"image": image, "prompt": prompt, "answer": answer})
        n = mixed.x.shape[1]
        attn = prefix_lm_mask(mixed.end_of("prompt"), n, mixed.x.device)  # [N, N]
        hidden = self.encoder(mixed.x, mixed.mask, attn_mask=attn)  # [B, N, d]
        return self.head(hidden[:, mixed.spans["answer"]])

    def read_prefix(self, image: TokenBatch, prompt: TokenBatch, caches: list[KVCache]) -> Tensor:
        """Run image + prompt through the stack once (bidirectionally), filling ``caches``; returns the
        prefix's key mask ``[B, Np]``, which decoding extends by one True per answer token."""
        x = torch.cat([self.segments.embed("image", image), self.segments.embed("prompt", prompt)], dim=1)
        mask = torch.cat([image.mask, prompt.mask], dim=1)
        self.encoder(x, mask, caches=caches)
        return mask

    def step(self, tokens: Tensor, position: int, key_mask: Tensor, caches: list[KVCache]) -> Tensor:
        """One answer token per row, ``tokens`` ``[B]`` at answer position ``position``, after the
        cached prefix and answer so far (``key_mask`` ``[B, Nk]`` covers them and this token):
        the next token's logits ``[B, V]``."""
        batch = TokenBatch(ids=tokens[:, None], mask=torch.ones_like(tokens[:, None], dtype=torch.bool),
                           positions=torch.full_like(tokens[:, None], position))
        hidden = self.encoder(self.segments.embed("answer", batch), key_mask, caches=caches)  # [B, 1, d]
        return self.head(hidden[:, -1])

    def make_caches(self) -> list[KVCache]:
        return make_caches(len(self.encoder.blocks))


@torch.no_grad()
def generate_answers(model: VisionLanguageModel, image: TokenBatch, prompt: TokenBatch, *, bos_id: int,
                     eos_id: int, max_new_tokens: int, sampling: SamplingConfig | None = None,
                     generator: torch.Generator | None = None, suppress: Sequence[int] = ()) -> list[list[int]]:
    """Each row's answer ids (without BOS and EOS): the prefix read once, then greedy decoding
    (``sampling.temperature == 0``, the default here) or sampling, up to ``max_new_tokens``. The ids of
    ``suppress`` are never chosen (BOS and padding: no answer holds them, as Hugging Face's
    ``suppress_tokens``)."""
    sampling = sampling or SamplingConfig(temperature=0.0)
    model.eval()
    caches = model.make_caches()
    key_mask = model.read_prefix(image, prompt, caches)  # [B, Np]
    rows = key_mask.shape[0]
    tokens = torch.full((rows,), bos_id, dtype=torch.long, device=key_mask.device)
    answers: list[list[int]] = [[] for _ in range(rows)]
    running = torch.ones(rows, dtype=torch.bool, device=key_mask.device)
    for position in range(max_new_tokens):
        key_mask = torch.cat([key_mask, torch.ones_like(key_mask[:, :1])], dim=1)
        logits = model.step(tokens, position, key_mask, caches)  # [B, V]
        logits[:, list(suppress)] = torch.finfo(logits.dtype).min  # finite: sample_next refuses inf as damage
        tokens = sample_next(logits, sampling, generator)  # [B]
        for row in running.nonzero().flatten().tolist():
            if int(tokens[row]) == eos_id:
                running[row] = False
            else:
                answers[row].append(int(tokens[row]))
        if not running.any():
            break
    return answers
