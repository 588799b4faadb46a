"""The properties the core rests on: equivariance, causality, padding invariance,
parity with torch.nn's Transformer layers, and KV-cache decoding equal to a full pass."""

import pytest
import torch
from torch import nn

from tokformer.blocks import DecoderBlock, EncoderBlock
from tokformer.config import TransformerConfig
from tokformer.kv_cache import make_caches
from tokformer.transformer import Decoder, Encoder
from tokformer.weights import count_parameters

CFG = TransformerConfig(d_model=32, n_heads=4, n_layers=2, dropout=0.0, activation="gelu")


def test_bidirectional_encoder_without_positions_is_permutation_equivariant(device):
    encoder = Encoder(CFG).to(device).eval()
    x = torch.randn(2, 8, 32, device=device)
    perm = torch.randperm(8, device=device)
    torch.testing.assert_close(encoder(x)[:, perm], encoder(x[:, perm]), atol=1e-5, rtol=1e-5)


def test_causal_outputs_never_depend_on_later_tokens(device):
    encoder = Encoder(CFG).to(device).eval()
    x = torch.randn(2, 10, 32, device=device)
    changed = x.clone()
    t = 4
    changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :])
    before, after = encoder(x, is_causal=True), encoder(changed, is_causal=True)
    torch.testing.assert_close(before[:, : t + 1], after[:, : t + 1], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :])


@pytest.mark.parametrize("is_causal", [False, True])
def test_appending_padding_never_changes_real_token_outputs(is_causal, device):
    encoder = Encoder(CFG).to(device).eval()
    x = torch.randn(1, 6, 32, device=device)
    padded = torch.cat([x, 100 * torch.randn(1, 5, 32, device=device)], dim=1)
    mask = torch.tensor([[True] * 6 + [False] * 5], device=device)
    torch.testing.assert_close(
        encoder(padded, mask, is_causal=is_causal)[:, :6], encoder(x, is_causal=is_causal), atol=1e-5, rtol=1e-5
    )


def copy_encoder_layer(ours: EncoderBlock, ref: nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
        ref.self_attn.out_proj.weight.copy_(ours.attn.proj.weight)
        ref.self_attn.out_proj.bias.copy_(ours.attn.proj.bias)
        pairs = [(ours.mlp.fc1, ref.linear1), (ours.mlp.fc2, ref.linear2),
                 (ours.norm1, ref.norm1), (ours.norm2, ref.norm2)]
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_matches_torch_transformer_encoder_layer(norm_first, activation):
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, activation=activation,
                            norm_first=norm_first)
    ours = EncoderBlock(cfg).eval()
    for p in ours.parameters():  # non-trivial norms too
        nn.init.normal_(p, std=0.3)
    ref = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first).eval()
    copy_encoder_layer(ours, ref)
    x = torch.randn(2, 7, 32)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    expected = ref(x, src_key_padding_mask=~keep)  # torch: True = padding
    got = ours(x, attn_mask=keep[:, None, None, :])
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)


def copy_decoder_layer(ours: DecoderBlock, ref: nn.TransformerDecoderLayer) -> None:
    """Our weights into ref. Every ref parameter is NaN first, so one this misses shows up as
    NaN outputs (a failure), never as a silent default that happens to match."""
    with torch.no_grad():
        for p in ref.parameters():
            p.fill_(float("nan"))
        ref.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
        ref.multihead_attn.in_proj_weight.copy_(torch.cat([ours.cross_attn.q.weight, ours.cross_attn.kv.weight]))
        ref.multihead_attn.in_proj_bias.copy_(torch.cat([ours.cross_attn.q.bias, ours.cross_attn.kv.bias]))
        pairs = [(ours.attn.proj, ref.self_attn.out_proj), (ours.cross_attn.proj, ref.multihead_attn.out_proj),
                 (ours.mlp.fc1, ref.linear1), (ours.mlp.fc2, ref.linear2),
                 (ours.norm1, ref.norm1), (ours.norm2, ref.norm2), (ours.norm3, ref.norm3)]
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)


@pytest.mark.parametrize("memory_padding", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_block_matches_torch_transformer_decoder_layer(norm_first, activation, memory_padding):
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, activation=activation,
                            norm_first=norm_first)
    ours = DecoderBlock(cfg).eval()
    for p in ours.parameters():  # every parameter random: norms with weight 1 and bias 0 would hide a swap
        nn.init.normal_(p, std=0.3)
    ref = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first).eval()
    assert count_parameters(ours) == count_parameters(ref)  # nothing of ours goes uncompared
    copy_decoder_layer(ours, ref)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    keep = torch.tensor([[True] * 6, [True] * 3 + [False] * 3] if memory_padding else [[True] * 6] * 2)
    if memory_padding:  # padded memory slots hold huge values: any leak through the mask shows
        memory[1, 3:] = 100 * torch.randn(3, 32)
    expected = ref(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True,
                   memory_key_padding_mask=~keep)  # torch: True = padding
    got = ours(x, memory, memory_mask=keep[:, None, None, :])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_causal_encoder_kv_cache_decoding_equals_full_pass(device):
    encoder = Encoder(CFG).to(device).eval()
    x = torch.randn(2, 12, 32, device=device)
    full = encoder(x, is_causal=True)
    caches = make_caches(CFG.n_layers)
    outputs = [encoder(x[:, :5], is_causal=True, caches=caches)]
    outputs += [encoder(x[:, t : t + 1], is_causal=True, caches=caches) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, atol=1e-5, rtol=1e-5)


def test_kv_cache_with_left_padding_masks_cached_keys():
    encoder = Encoder(CFG).eval()
    x = torch.randn(1, 6, 32)
    mask = torch.tensor([[False, False, True, True, True, True]])  # two pad tokens on the left
    full = encoder(x, mask, is_causal=True)
    caches = make_caches(CFG.n_layers)
    steps = [encoder(x[:, :3], mask[:, :3], is_causal=True, caches=caches)]
    steps += [encoder(x[:, t : t + 1], mask[:, : t + 1], is_causal=True, caches=caches) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1)[:, 2:], full[:, 2:], atol=1e-5, rtol=1e-5)


def test_post_norm_stack_has_no_final_norm_and_pre_norm_has_one():
    pre = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=1, norm_first=True))
    post = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=1, norm_first=False))
    assert isinstance(pre.norm, nn.LayerNorm)
    assert isinstance(post.norm, nn.Identity)


def test_parameter_count_matches_formula():
    d, f, n = 32, 128, 2
    cfg = TransformerConfig(d_model=d, n_heads=4, n_layers=n, d_ff=f)
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 2 * (2 * d)
    assert count_parameters(Encoder(cfg)) == n * per_block + 2 * d
    decoder_block = per_block + (d * d + d) + (2 * d * d + 2 * d) + (d * d + d) + 2 * d
    assert count_parameters(Decoder(cfg)) == n * decoder_block + 2 * d


def test_count_parameters_counts_shared_weights_once():
    shared = nn.Linear(4, 4)
    assert count_parameters(nn.Sequential(shared, shared)) == 20


def test_residual_projections_get_depth_scaled_init():
    encoder = Encoder(TransformerConfig(d_model=256, n_heads=4, n_layers=8))
    block = encoder.blocks[0]
    assert block.attn.proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.1)
    assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=30, n_heads=4), "divisible"),
        (dict(d_model=0), "positive"),
        (dict(n_layers=-1), "positive"),
        (dict(dropout=1.5), r"\[0, 1\)"),
        (dict(activation="tanh"), "activation"),
    ],
)
def test_config_rejects_impossible_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**kwargs)


def test_dropout_is_active_only_in_training():
    encoder = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=1, dropout=0.5))
    x = torch.randn(1, 4, 16)
    encoder.eval()
    torch.testing.assert_close(encoder(x), encoder(x))
    encoder.train()
    assert not torch.allclose(encoder(x), encoder(x))
