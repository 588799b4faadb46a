"""Today's architecture options of the core, each against its reference module with copied weights.

RMSNorm, rotary embeddings, gated MLPs, grouped-query attention and per-projection biases
are checked against Hugging Face's Llama / Qwen2 / Gemma layers; q/k norm, layer scale,
tanh and quick GELU and attention pooling against timm's. Every parameter is randomised
before comparing, norms included, so a swapped or skipped tensor cannot hide.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tokformer.attention import MultiHeadAttention
from tokformer.blocks import EncoderBlock
from tokformer.config import TransformerConfig
from tokformer.heads import AttentionPool, ClassificationHead
from tokformer.kv_cache import make_caches
from tokformer.layers import GatedFeedForward, make_activation, make_norm
from tokformer.rotary import Rope, RotaryEmbedding, apply_rotary
from tokformer.transformer import Encoder

transformers = pytest.importorskip("transformers")
timm_layers = pytest.importorskip("timm.layers")


def randomise(*modules: nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0) * 0.5)


def llama_config(**overrides):
    base = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=8,
                num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=5000.0, max_position_embeddings=128,
                attention_bias=False, mlp_bias=False)
    base.update(overrides)
    return base


def llama_block_state(hf_layer: nn.Module) -> dict[str, torch.Tensor]:
    """HF Llama decoder-layer weights under our EncoderBlock's names (q/k/v stacked into qkv)."""
    a, m = hf_layer.self_attn, hf_layer.mlp
    state = {
        "norm1.weight": hf_layer.input_layernorm.weight,
        "norm2.weight": hf_layer.post_attention_layernorm.weight,
        "attn.qkv.weight": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
        "attn.proj.weight": a.o_proj.weight,
        "mlp.fc1.weight": torch.cat([m.gate_proj.weight, m.up_proj.weight]),
        "mlp.fc2.weight": m.down_proj.weight,
    }
    if a.q_proj.bias is not None:
        state["attn.qkv.bias"] = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
    return state


@pytest.mark.parametrize(
    ("family", "n_kv_heads", "qkv_bias"),
    [("llama", 2, False), ("llama", 1, False), ("llama", 8, False), ("qwen2", 4, True)],
)
def test_llama_layout_block_matches_hugging_face(family: str, n_kv_heads: int, qkv_bias: bool) -> None:
    """RMSNorm + 1-D RoPE (half-split, rope_theta) + SwiGLU + GQA/MQA + q/k/v-only biases = HF's decoder layer."""
    if family == "llama":
        from transformers import LlamaConfig as Config
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer as Layer
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as Rotary
        hf_cfg = Config(**llama_config(num_key_value_heads=n_kv_heads))
    else:
        from transformers import Qwen2Config as Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer as Layer
        from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding as Rotary
        cfg = llama_config(num_key_value_heads=n_kv_heads)
        cfg.pop("attention_bias"), cfg.pop("mlp_bias")
        hf_cfg = Config(**cfg)
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = Layer(hf_cfg, layer_idx=0).eval()
    randomise(hf)
    ours = EncoderBlock(TransformerConfig(
        d_model=64, n_heads=8, n_layers=1, d_ff=96, dropout=0.0, norm="rms", norm_eps=1e-5, mlp="swiglu",
        n_kv_heads=n_kv_heads, rope="1d", rope_theta=5000.0, bias=False, qkv_bias=qkv_bias,
    )).eval()
    ours.load_state_dict(llama_block_state(hf))

    x = torch.randn(2, 11, 64)
    positions = torch.arange(3, 14).expand(2, -1)  # not starting at 0: the rotation must really depend on p
    with torch.no_grad():
        cos, sin = Rotary(hf_cfg)(x, positions)
        expected = hf(x, attention_mask=None, position_ids=positions, position_embeddings=(cos, sin))
        if isinstance(expected, tuple):
            expected = expected[0]
        rope = RotaryEmbedding(8, 5000.0)(positions)
        got = ours(x, is_causal=True, rope=rope)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_rms_norm_matches_llama() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf, ours = LlamaRMSNorm(24, eps=1e-6), make_norm("rms", 24, 1e-6)
    randomise(hf)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(3, 5, 24) * 4 + 1
    torch.testing.assert_close(ours(x), hf(x))
    assert set(ours.state_dict()) == {"weight"}  # no bias, no mean: RMSNorm, not LayerNorm


def test_geglu_matches_gemma_mlp() -> None:
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    hf = GemmaMLP(GemmaConfig(hidden_size=32, intermediate_size=48, hidden_activation="gelu_pytorch_tanh"))
    randomise(hf)
    ours = EncoderBlock(TransformerConfig(d_model=32, n_heads=4, d_ff=48, mlp="geglu", activation="gelu_tanh",
                                          bias=False, dropout=0.0)).mlp
    assert isinstance(ours, GatedFeedForward)
    ours.load_state_dict({"fc1.weight": torch.cat([hf.gate_proj.weight, hf.up_proj.weight]),
                          "fc2.weight": hf.down_proj.weight})
    x = torch.randn(4, 7, 32)
    torch.testing.assert_close(ours(x), hf(x))


def test_swiglu_matches_timm_packed_swiglu() -> None:
    ref = timm_layers.SwiGLUPacked(32, 2 * 40)
    randomise(ref)
    ours = GatedFeedForward(32, 40, activation="silu")
    ours.load_state_dict({k: v for k, v in ref.state_dict().items() if not k.startswith("norm")})
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(ours(x), ref(x))


@pytest.mark.parametrize(("name", "reference"), [
    ("gelu_tanh", lambda x: nn.functional.gelu(x, approximate="tanh")),
    ("quick_gelu", lambda x: timm_layers.QuickGELU()(x)),
    ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
])
def test_activations_match_reference(name: str, reference) -> None:
    x = torch.linspace(-6, 6, 1001)
    torch.testing.assert_close(make_activation(name)(x), reference(x))
    if name != "gelu":  # the approximations really differ from exact GELU
        assert (make_activation(name)(x) - nn.functional.gelu(x)).abs().max() > 1e-4


def test_qk_norm_and_layer_scale_block_matches_timm() -> None:
    """timm's Block(qk_norm=True, init_values=...) and ours share names: load by name, same outputs."""
    from timm.models.vision_transformer import Block

    timm_block = Block(64, 8, qkv_bias=True, qk_norm=True, init_values=1e-2).eval()
    randomise(timm_block)
    ours = EncoderBlock(TransformerConfig(d_model=64, n_heads=8, d_ff=256, dropout=0.0, activation="gelu",
                                          norm_eps=1e-6, qk_norm=True, layer_scale=1e-2)).eval()
    ours.load_state_dict(timm_block.state_dict())
    x = torch.randn(2, 9, 64)
    torch.testing.assert_close(ours(x), timm_block(x), atol=1e-5, rtol=1e-5)


def test_layer_scale_starts_at_its_init_value() -> None:
    block = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=2, layer_scale=1e-4)).blocks[1]
    assert torch.all(block.ls1.gamma == 1e-4) and torch.all(block.ls2.gamma == 1e-4)


def test_attention_pool_matches_timm_map_head() -> None:
    ref = timm_layers.AttentionPoolLatent(32, num_heads=4, mlp_ratio=3.0, norm_layer=nn.LayerNorm).eval()
    randomise(ref)
    ours = AttentionPool(32, 4, 96, norm_eps=1e-5).eval()
    state = {k.replace("q.", "attn.q.", 1).replace("kv.", "attn.kv.", 1).replace("proj.", "attn.proj.", 1)
             if k.split(".")[0] in ("q", "kv", "proj") else k: v for k, v in ref.state_dict().items()}
    ours.load_state_dict(state)
    x = torch.randn(3, 10, 32)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_attention_pool_ignores_padding_and_prefix() -> None:
    torch.manual_seed(0)
    head = ClassificationHead(16, 3, pool="map", n_prefix=1, pool_heads=2).eval()
    x = torch.randn(1, 6, 16)
    mask = torch.ones(1, 6, dtype=torch.bool)
    padded = torch.cat([x, torch.randn(1, 3, 16)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(1, 3, dtype=torch.bool)], dim=1)
    changed_prefix = x.clone()
    changed_prefix[:, 0] += 5
    torch.testing.assert_close(head(padded, padded_mask), head(x, mask))
    torch.testing.assert_close(head(changed_prefix, mask), head(x, mask))


def test_grouped_query_cache_stores_only_kv_heads_and_equals_full_pass() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=8, n_kv_heads=2, n_layers=2, dropout=0.0, rope="1d", norm="rms",
                            mlp="swiglu")
    enc = Encoder(cfg).eval()
    x, positions = torch.randn(2, 9, 32), torch.arange(9).expand(2, -1)
    full = enc(x, is_causal=True, positions=positions)
    caches = make_caches(2)
    steps = [enc(x[:, :5], is_causal=True, caches=caches, positions=positions[:, :5])]
    for t in range(5, 9):
        steps.append(enc(x[:, t : t + 1], is_causal=True, caches=caches, positions=positions[:, t : t + 1]))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert caches[0].keys.shape == (2, 2, 9, 4)  # [B, n_kv_heads, T, d_head]: 4x smaller than full MHA


def test_grouped_query_attention_equals_repeated_kv_heads() -> None:
    """GQA is MHA whose key/value heads are repeated across each query group."""
    torch.manual_seed(0)
    gqa = MultiHeadAttention(32, 8, n_kv_heads=2).eval()
    mha = MultiHeadAttention(32, 8).eval()
    q_w, k_w, v_w = gqa.qkv.weight.split([32, 8, 8])
    q_b, k_b, v_b = gqa.qkv.bias.split([32, 8, 8])
    repeat = lambda t: t.reshape(2, 4, *t.shape[1:]).repeat_interleave(4, dim=0).reshape(32, *t.shape[1:])
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([q_w, repeat(k_w), repeat(v_w)]))
        mha.qkv.bias.copy_(torch.cat([q_b, repeat(k_b), repeat(v_b)]))
        mha.proj.load_state_dict(gqa.proj.state_dict())
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(gqa(x, is_causal=True), mha(x, is_causal=True))


def test_rotary_scores_depend_on_offset_only() -> None:
    """q(m) . k(n) after rotation depends on m - n alone, in 1-D and per axis in 2-D."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(rotary: RotaryEmbedding, pm: list, pn: list) -> torch.Tensor:
        rq, rk = rotary(torch.tensor([[pm]]).squeeze(-1)), rotary(torch.tensor([[pn]]).squeeze(-1))
        return (apply_rotary(q, rq) * apply_rotary(k, rk)).sum()

    one = RotaryEmbedding(16, 100.0)
    torch.testing.assert_close(score(one, [7], [3]), score(one, [104], [100]))
    assert not torch.isclose(score(one, [7], [3]), score(one, [8], [3]))
    two = RotaryEmbedding(16, 100.0, dims=2)
    torch.testing.assert_close(score(two, [5, 2], [1, 9]), score(two, [14, 3], [10, 10]))
    assert not torch.isclose(score(two, [5, 2], [1, 9]), score(two, [5, 3], [1, 9]))


def test_rotary_position_zero_is_identity() -> None:
    x = torch.randn(2, 3, 4, 8)
    for dims, positions in ((1, torch.zeros(2, 4)), (2, torch.zeros(2, 4, 2))):
        torch.testing.assert_close(apply_rotary(x, RotaryEmbedding(8, dims=dims)(positions)), x)
    rope = Rope(torch.ones(1, 1, 4, 8), torch.zeros(1, 1, 4, 8))
    torch.testing.assert_close(apply_rotary(x, rope), x)


def test_registers_equal_tokens_prepended_by_hand() -> None:
    """An encoder with registers = the same encoder reading [registers, tokens], minus the register outputs."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.0, n_registers=3)
    with_reg = Encoder(cfg).eval()
    plain = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.0)).eval()
    plain.load_state_dict({k: v for k, v in with_reg.state_dict().items() if k != "registers"})
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    by_hand = torch.cat([with_reg.registers.expand(2, -1, -1), x], dim=1)
    by_hand_mask = torch.cat([torch.ones(2, 3, dtype=torch.bool), mask], dim=1)
    out = with_reg(x, mask)
    assert out.shape == (2, 5, 16)
    torch.testing.assert_close(out, plain(by_hand, by_hand_mask)[:, 3:])
    assert not torch.allclose(out, plain(x, mask), atol=1e-4)  # the registers really take part
    assert len({tuple(r.tolist()) for r in with_reg.registers[0]}) == 3  # initialised distinct


def test_registers_in_a_cached_causal_stack() -> None:
    torch.manual_seed(0)
    enc = Encoder(TransformerConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.0, n_registers=2, rope="1d")).eval()
    x, positions = torch.randn(1, 6, 16), torch.arange(6)[None]
    mask = torch.ones(1, 6, dtype=torch.bool)
    full = enc(x, mask, is_causal=True, positions=positions)
    caches = make_caches(2)
    first = enc(x[:, :4], mask[:, :4], is_causal=True, caches=caches, positions=positions[:, :4])
    rest = [enc(x[:, t : t + 1], mask[:, : t + 1], is_causal=True, caches=caches, positions=positions[:, t : t + 1])
            for t in (4, 5)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("field", ["qkv", "out", "mlp"])
def test_biases_switch_per_projection(field: str) -> None:
    block = EncoderBlock(TransformerConfig(d_model=16, n_heads=2, bias=False, **{f"{field}_bias": True}))
    has_bias = {"qkv": block.attn.qkv.bias is not None, "out": block.attn.proj.bias is not None,
                "mlp": block.mlp.fc1.bias is not None and block.mlp.fc2.bias is not None}
    assert has_bias == {name: name == field for name in has_bias}


def test_new_options_default_to_the_classic_block() -> None:
    block = EncoderBlock(TransformerConfig(d_model=16, n_heads=2))
    assert isinstance(block.norm1, nn.LayerNorm) and isinstance(block.ls1, nn.Identity)
    assert isinstance(block.attn.q_norm, nn.Identity) and block.attn.qkv.out_features == 48
    assert Encoder(TransformerConfig(d_model=16, n_heads=2)).rotary is None


@pytest.mark.parametrize("bad", [
    dict(n_kv_heads=3), dict(norm="batch"), dict(mlp="moe"), dict(rope="3d"), dict(activation="gelu_erf"),
    dict(n_heads=4, d_model=24, rope="2d"), dict(n_registers=-1), dict(rope_theta=0.0),
])
def test_bad_options_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        TransformerConfig(**{"d_model": 16, "n_heads": 4, **bad})


def test_rotary_stack_needs_positions() -> None:
    enc = Encoder(TransformerConfig(d_model=16, n_heads=2, rope="1d"))
    with pytest.raises(ValueError, match="positions"):
        enc(torch.randn(1, 3, 16))
