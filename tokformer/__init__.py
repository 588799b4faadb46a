"""tokformer: a general token-based Transformer framework.

Tokenizers (``tokformer.tokenizers``) turn any modality into a :class:`TokenBatch`; one
shared Transformer core mixes tokens; task heads (``tokformer.tasks``) read the result.
"""

import importlib
from typing import Any

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.engine import evaluate, train
from tokformer.transformer import Decoder, Encoder, EncoderDecoder
from tokformer.weights import count_parameters

__all__ = ["TokenBatch", "TransformerConfig", "Embedder", "Encoder", "Decoder", "EncoderDecoder", "count_parameters",
           "train", "evaluate", "save_pretrained", "from_pretrained", "load_model"]
__version__ = "0.1.0"

# Imported on first use: model-folder support is only needed by code that loads or exports models.
_LAZY = {name: "tokformer.engine.pretrained" for name in ("save_pretrained", "from_pretrained", "load_model")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tokformer' has no attribute {name!r}")
