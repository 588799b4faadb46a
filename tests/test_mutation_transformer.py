"""What the Transformer core promises that its parity and end-to-end tests left unchecked (mutation testing,
benchmarks/results/mutation.md): every config option reaches the module it sets, the plain MLP's defaults,
the decoder's masks, causality and rotary positions, and register tokens under an explicit mask, with a
KV cache, in mixed precision and out of weight decay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokformer.blocks import EncoderBlock
from tokformer.config import TransformerConfig
from tokformer.engine.optim import no_decay_names
from tokformer.kv_cache import make_caches
from tokformer.layers import FeedForward, GatedFeedForward
from tokformer.sparse_attention import SparsePattern
from tokformer.transformer import Decoder, Encoder

D, HEADS = 16, 2


def config(**options) -> TransformerConfig:
    return TransformerConfig(**{"d_model": D, "n_heads": HEADS, "n_layers": 2, "dropout": 0.0, **options})


def randomised(module: nn.Module) -> nn.Module:
    """Every parameter drawn at random (norms and layer scales too): nothing left at 0/1 hides a mix-up."""
    torch.manual_seed(1)
    for p in module.parameters():
        nn.init.normal_(p, std=0.3)
    return module.eval()


# -- options reach their modules ---------------------------------------------------------------------


def test_dropout_rates_and_the_norm_epsilon_reach_attention_and_the_mlp() -> None:
    block = EncoderBlock(config(dropout=0.3, attn_dropout=0.2, qk_norm=True, norm_eps=1e-3))
    assert block.attn.dropout == 0.2, "attention weights drop at attn_dropout"
    assert block.attn.proj_drop.p == 0.3, "the attention output drops at dropout"
    assert block.attn.q_norm.eps == block.attn.k_norm.eps == 1e-3
    assert block.mlp.drop1.p == block.mlp.drop2.p == 0.3
    gated = EncoderBlock(config(dropout=0.3, mlp="swiglu"))
    assert gated.mlp.drop1.p == gated.mlp.drop2.p == 0.3


@pytest.mark.parametrize(("mlp", "activation", "gate"), [
    ("swiglu", "gelu", nn.SiLU),  # SwiGLU's gate is SiLU whatever the activation says
    ("geglu", "relu", nn.GELU),  # GeGLU's is GELU: exact unless the tanh form is asked for
    ("geglu", "gelu", nn.GELU),
    ("geglu", "gelu_tanh", nn.GELU),
])
def test_a_gated_mlps_gate_activation(mlp: str, activation: str, gate: type[nn.Module]) -> None:
    act = EncoderBlock(config(mlp=mlp, activation=activation)).mlp.act
    assert type(act) is gate
    if gate is nn.GELU:
        assert act.approximate == ("tanh" if activation == "gelu_tanh" else "none")


def test_rotary_options_reach_the_rotary_embedding() -> None:
    for stack in (Encoder, Decoder):
        rotary = stack(config(rope="1d", rope_theta=100.0)).rotary
        assert rotary.theta == 100.0
    grid = Encoder(config(rope="2d", rope_ref_grid=(3, 5))).rotary
    assert grid.ref_grid == (3, 5)


def test_the_plain_mlp_defaults_are_the_papers() -> None:
    """512 -> 2048 -> 512 with ReLU, biases and no dropout unless asked for; ``bias=False`` drops both biases."""
    mlp = FeedForward(4, 8)
    assert type(mlp.act) is nn.ReLU
    assert mlp.drop1.p == mlp.drop2.p == 0.0
    assert mlp.fc1.bias is not None and mlp.fc2.bias is not None
    bare = FeedForward(4, 8, bias=False)
    assert bare.fc1.bias is None and bare.fc2.bias is None
    assert type(GatedFeedForward(4, 8).act) is nn.SiLU, "the gated MLP is SwiGLU by default"


# -- the decoder ---------------------------------------------------------------------------------------


def test_the_decoder_is_causal_by_default() -> None:
    decoder = randomised(Decoder(config()))
    x, memory = torch.randn(2, 5, D), torch.randn(2, 3, D)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 2, D)  # the last two tokens only
    out, out_changed = decoder(x, memory), decoder(changed, memory)
    torch.testing.assert_close(out[:, :3], out_changed[:, :3], rtol=0, atol=0)
    assert not torch.allclose(out[:, 3:], out_changed[:, 3:])
    unmasked = decoder(x, memory, is_causal=False)  # e.g. a non-autoregressive decoder: every token sees all
    assert not torch.allclose(unmasked[:, :3], decoder(changed, memory, is_causal=False)[:, :3])


def test_the_decoder_ignores_padded_memory_and_padded_target_tokens() -> None:
    decoder = randomised(Decoder(config()))
    x, memory = torch.randn(2, 4, D), torch.randn(2, 3, D)
    reference = decoder(x, memory)
    # garbage memory after the real tokens, masked out
    padded_memory = torch.cat([memory, 100 * torch.randn(2, 2, D)], dim=1)  # [B, 5, d]
    memory_mask = torch.tensor([[True] * 3 + [False] * 2] * 2)
    torch.testing.assert_close(decoder(x, padded_memory, memory_mask=memory_mask), reference)
    # garbage target tokens in front (left padding), masked out: causality alone would let them in
    padded_x = torch.cat([100 * torch.randn(2, 2, D), x], dim=1)  # [B, 6, d]
    mask = torch.tensor([[False] * 2 + [True] * 4] * 2)
    torch.testing.assert_close(decoder(padded_x, memory, mask=mask)[:, 2:], reference)


def test_the_decoders_rotary_positions_rotate_its_self_attention() -> None:
    decoder = randomised(Decoder(config(rope="1d")))
    x, memory = torch.randn(1, 4, D), torch.randn(1, 3, D)
    positions = torch.arange(4)[None]
    out = decoder(x, memory, positions=positions)
    torch.testing.assert_close(decoder(x, memory, positions=positions + 7), out)  # relative: a shift is nothing
    spread = torch.tensor([[0, 3, 5, 9]])
    assert not torch.allclose(decoder(x, memory, positions=spread), out), "other distances, other attention"
    with pytest.raises(ValueError, match="positions"):
        decoder(x, memory)


# -- register tokens -----------------------------------------------------------------------------------


def test_registers_are_kept_out_of_weight_decay() -> None:
    assert "registers" in no_decay_names(Encoder(config(n_registers=2)))
    assert Encoder(config()).no_weight_decay() == []


FORMS = ["[N, N] bool", "[B, 1, N, N] bool", "[N, N] additive", "[B, H, N, N] additive", "sparse pattern"]


@pytest.mark.parametrize("form", FORMS)
def test_registers_are_global_tokens_under_any_form_of_a_bidirectional_mask(form: str) -> None:
    """Under a structured bidirectional mask (a graph's neighbourhoods, say), given in any shape and kind,
    the registers see every token and every token sees them: the outputs of the same mask written out by
    the caller for the registers' slots."""
    n, n_reg = 5, 2
    encoder = randomised(Encoder(config(n_registers=n_reg)))
    x = torch.randn(2, n, D)
    upper = torch.rand(n, n) < 0.4
    allowed = upper | upper.T | torch.eye(n, dtype=torch.bool)  # [N, N] symmetric, each token sees itself
    masks = {"[N, N] bool": allowed, "[B, 1, N, N] bool": allowed.expand(2, 1, n, n),
             "[N, N] additive": torch.zeros(n, n).masked_fill(~allowed, float("-inf")),
             "[B, H, N, N] additive": torch.zeros(2, HEADS, n, n).masked_fill(~allowed, float("-inf")),
             "sparse pattern": sparse(allowed, batch=2)}
    out = encoder(x, attn_mask=masks[form])
    full = torch.ones(n + n_reg, n + n_reg, dtype=torch.bool)  # the registers' rows and columns open
    full[n_reg:, n_reg:] = allowed
    h = torch.cat([encoder.registers.expand(2, -1, -1), x], dim=1)
    for block in encoder.blocks:
        h = block(h, attn_mask=full)
    torch.testing.assert_close(out, encoder.norm(h[:, n_reg:]))
    assert not torch.allclose(out, encoder(x)), "the mask matters"


def sparse(allowed: torch.Tensor, batch: int) -> SparsePattern:
    """The pairs of a ``[N, N]`` bool mask, for every sample of a batch."""
    n = allowed.shape[0]
    query, key = allowed.nonzero().unbind(1)  # [P] each
    offsets = (torch.arange(batch) * n)[:, None]  # [B, 1]
    return SparsePattern((query + offsets).flatten(), (key + offsets).flatten(), torch.ones(batch, n, dtype=torch.bool))


def test_registers_are_global_under_a_mask_that_hides_keys_from_every_query() -> None:
    """A key-only mask (``[B, 1, 1, N]``: a query dim of 1 broadcasts) gains the registers' keys only, and
    so hides its keys from the registers too: what key padding does."""
    n, n_reg = 5, 2
    encoder = randomised(Encoder(config(n_registers=n_reg)))
    x = torch.randn(2, n, D)
    visible = torch.tensor([[True, False, True, True, False], [True, True, True, False, True]])  # [B, N]
    out = encoder(x, attn_mask=visible[:, None, None, :])
    torch.testing.assert_close(out, encoder(x, mask=visible))
    assert not torch.allclose(out, encoder(x)), "the mask matters"


def test_causal_registers_with_a_bias_and_a_kv_cache_compute_the_full_pass() -> None:
    """A causal stack with registers and an attention bias (a language model's ``attention_bias``):
    the registers enter with the first chunk, whose bias gains their rows and columns; a later chunk's
    bias gains their keys only. Chunk by chunk through the cache equals one pass."""
    n, k, n_reg = 6, 4, 2
    encoder = randomised(Encoder(config(n_registers=n_reg)))
    x, bias = torch.randn(2, n, D), torch.randn(HEADS, n, n)  # [H, N, N]
    full = encoder(x, is_causal=True, attn_mask=bias)
    caches = make_caches(len(encoder.blocks))
    first = encoder(x[:, :k], is_causal=True, attn_mask=bias[:, :k, :k], caches=caches)
    rest = encoder(x[:, k:], is_causal=True, attn_mask=bias[:, k:], caches=caches)  # [H, N - k, N]
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full)
    changed = x.clone()
    changed[:, -1] = torch.randn(2, D)
    torch.testing.assert_close(encoder(changed, is_causal=True, attn_mask=bias)[:, :-1], full[:, :-1],
                               rtol=0, atol=0, msg="the registers carry no later token back")


def test_registers_join_the_sequence_in_the_tokens_dtype() -> None:
    """Under autocast the tokens may arrive in bfloat16 while the registers are float32 parameters: the
    residual stream stays in the tokens' dtype instead of being promoted by the concatenation."""
    encoder = randomised(Encoder(config(n_registers=2)))
    seen: list[torch.dtype] = []
    encoder.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        encoder(torch.randn(2, 3, D, dtype=torch.bfloat16))
    assert seen == [torch.bfloat16]
