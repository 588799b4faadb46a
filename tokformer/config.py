"""`TransformerConfig`: the sizes and switches of a Transformer stack."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from tokformer.layers import ACTIVATIONS, MLPS, NORMS
from tokformer.rotary import ROPE_AXES, ROPE_LAYOUTS

ROPES = ("none", "1d", "2d")


@dataclass
class TransformerConfig:
    """Shape of one Transformer stack. Defaults are the paper's base model.

    Attributes:
        d_model: token width (512 in the paper).
        n_heads: attention heads; must divide ``d_model``.
        n_layers: number of blocks.
        d_ff: feed-forward width; None means ``4 * d_model`` (the paper's 2048).
        dropout: residual-branch and feed-forward dropout.
        attn_dropout: dropout on attention weights; None means ``dropout``.
        activation: feed-forward activation: relu (the paper), gelu (BERT, ViT), gelu_tanh
            (GPT-2, SigLIP), quick_gelu (OpenAI CLIP) or silu.
        norm_first: pre-norm (True) or the paper's post-norm (False).
        bias: biases in linear layers (the default of the three switches below).
        qkv_bias / out_bias / mlp_bias: per-projection biases (None: ``bias``); Qwen2 has a
            q/k/v bias only, Llama none at all.
        norm: ``layer`` (LayerNorm) or ``rms`` (RMSNorm: no mean, no bias; Llama, T5).
        norm_eps: norm epsilon (1e-6 in timm's ViT, 1e-5 in Llama).
        final_norm: a pre-norm stack ends with a norm; False drops it, for heads that
            normalise after pooling instead (timm's ``fc_norm`` with average pooling).
        mlp: ``plain`` (``fc2(act(fc1 x))``) or a gated unit, ``swiglu`` (SiLU gate; Llama,
            DINOv2-giant) or ``geglu`` (GELU gate, tanh-approximated when ``activation``
            is ``gelu_tanh``; Gemma). A gated unit's ``d_ff`` is the width of each half.
        n_kv_heads: key/value heads for grouped-query attention (1 = multi-query); None
            means ``n_heads``. Each group of ``n_heads / n_kv_heads`` query heads shares
            one key/value head, and the KV cache holds only those.
        qk_norm: normalise queries and keys per head before the dot product (ViT-22B,
            Qwen3), which keeps attention logits from growing.
        layer_scale: initial value of a learned per-channel scale on each residual branch
            (CaiT, DeiT-3, DINOv2); None for none.
        rope: rotary position embeddings applied to queries and keys: ``1d`` for sequences
            (positions ``[B, N]``), ``2d`` for grids (``[B, N, 2]``), ``none`` to leave
            positions to the embedder.
        rope_theta: rotary frequency base (timm's ``rope_temperature``).
        rope_layout: which channels a rotation turns together: ``half`` (``i`` with ``i + d/2``;
            Llama, GPT-NeoX) or ``interleaved`` (adjacent pairs; GPT-J, timm's EVA and
            RoPE-ViT). Weights trained with one layout need it to compute the same function.
        rope_axes: 2-D only: ``ij`` rotates the first half of each head by the row and the
            second by the column; ``xy`` the other way round (timm's ``rope_grid_indexing``).
        rope_ref_grid: 2-D only: ``(rows, cols)`` that every grid is rescaled to span before
            rotating (timm's ``ref_feat_shape``): a model fine-tuned at another resolution
            keeps the angles it was pretrained with. None: raw grid indices.
        n_registers: learned register tokens the encoder prepends and drops again at its
            output ("Vision Transformers Need Registers"): scratch space for global state.
        input_norm: normalise the tokens (registers included) before the first block, as
            CLIP's ``ln_pre`` (timm's ``norm_pre``).
    """

    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int | None = None
    dropout: float = 0.1
    attn_dropout: float | None = None
    activation: str = "relu"
    norm_first: bool = True
    bias: bool = True
    norm_eps: float = 1e-5
    final_norm: bool = True
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None
    norm: str = "layer"
    mlp: str = "plain"
    n_kv_heads: int | None = None
    qk_norm: bool = False
    layer_scale: float | None = None
    rope: str = "none"
    rope_theta: float = 10000.0
    rope_layout: str = "half"
    rope_axes: str = "ij"
    rope_ref_grid: tuple[int, int] | None = None
    n_registers: int = 0
    input_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        # a few bytes of config must not buy minutes of building: deeper stacks than any trained model are typos
        if self.n_layers > MAX_LAYERS or self.d_model > MAX_WIDTH:
            raise ValueError(f"n_layers must be at most {MAX_LAYERS} and d_model at most {MAX_WIDTH}, got "
                             f"{self.n_layers} and {self.d_model}")
        if self.d_ff is not None and self.d_ff <= 0:
            raise ValueError(f"d_ff must be positive, got {self.d_ff}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"pick n_heads among {[h for h in range(1, self.d_model + 1) if self.d_model % h == 0][:12]}"
            )
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        for name, allowed in (("activation", ACTIVATIONS), ("norm", NORMS), ("mlp", MLPS), ("rope", ROPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {sorted(allowed)}, got {getattr(self, name)!r}")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads != 0):
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must be positive and divide n_heads={self.n_heads}")
        if self.rope != "none" and self.d_head % (4 if self.rope == "2d" else 2) != 0:
            raise ValueError(f"{self.rope} rotary embeddings need d_head={self.d_head} divisible by "
                             f"{4 if self.rope == '2d' else 2}")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be positive, got {self.rope_theta}")
        for name, allowed in (("rope_layout", ROPE_LAYOUTS), ("rope_axes", ROPE_AXES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if self.rope_ref_grid is not None:
            grid = tuple(self.rope_ref_grid)  # a JSON config gives a list
            if len(grid) != 2 or not all(isinstance(g, int) and g > 0 for g in grid):
                raise ValueError(f"rope_ref_grid must be two positive integers (rows, cols), got {self.rope_ref_grid}")
            self.rope_ref_grid = grid
        if self.rope != "2d" and (self.rope_axes != "ij" or self.rope_ref_grid is not None):
            raise ValueError("rope_axes and rope_ref_grid describe grids: they need rope='2d'")
        if self.n_registers < 0:
            raise ValueError(f"n_registers must be >= 0, got {self.n_registers}")

    @property
    def ff_width(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def attn_dropout_p(self) -> float:
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def bias_of(self, projection: str) -> bool:
        """Whether ``qkv``, ``out`` or ``mlp`` projections have biases."""
        value = getattr(self, f"{projection}_bias")
        return self.bias if value is None else value


#: The deepest and widest stacks a config may ask for (beyond every published model; a larger number
#: in a config file is a typo or an attack, and even sizing such a model takes minutes).
MAX_LAYERS = 1024
MAX_WIDTH = 65536

#: Config field metadata key marking an option that fixes a model's shape (fine-tuning copies those).
ARCHITECTURE = "architecture"


def architecture_fields(config_cls: type) -> tuple[str, ...]:
    """The options of a config dataclass that fix the model's shape (metadata ``ARCHITECTURE``)."""
    return tuple(f.name for f in fields(config_cls) if f.metadata.get(ARCHITECTURE))


def _option(default: object, help: str) -> Any:
    return field(default=default, metadata={"help": help, ARCHITECTURE: True})


@dataclass
class BlockOptions:
    """The block-level switches of :class:`TransformerConfig` that a task offers as its own options.

    A task config inherits this and passes :meth:`block_options` on to its stacks, so every
    task spells these options, their defaults and their help the same way.
    """

    norm: Literal["layer", "rms"] = _option("layer", "layer (LayerNorm) or rms (RMSNorm)")
    mlp: Literal["plain", "swiglu", "geglu"] = _option("plain", "feed-forward: plain, or gated: swiglu, geglu")
    n_kv_heads: int | None = _option(None, "key/value heads for grouped-query attention (default: n_heads)")
    qk_norm: bool = _option(False, "normalise queries and keys per head")
    layer_scale: float | None = _option(None, "initial per-channel residual scale, e.g. 1e-5 (default: off)")
    bias: bool = _option(True, "biases in linear layers")
    qkv_bias: bool | None = _option(None, "q/k/v projection biases (default: bias)")
    out_bias: bool | None = _option(None, "attention output projection bias (default: bias)")
    mlp_bias: bool | None = _option(None, "feed-forward biases (default: bias)")

    def block_options(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(BlockOptions)}
