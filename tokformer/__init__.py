"""tokformer: a general token-based Transformer framework.

Tokenizers (``tokformer.tokenizers``) turn any modality into a :class:`TokenBatch`; one
shared Transformer core mixes tokens; task heads (``tokformer.tasks``) read the result.

Every public name below is imported on first use (PEP 562 ``__getattr__``): importing the
package, as the ``tokformer`` command does before it knows the command, costs no torch and
no engine; ``from tokformer import Encoder`` and ``tokformer.train(...)`` work as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ provides them
    from tokformer.batch import TokenBatch
    from tokformer.config import TransformerConfig
    from tokformer.embedding import Embedder
    from tokformer.engine import evaluate, train
    from tokformer.seq2seq import Seq2Seq
    from tokformer.store import from_pretrained, load, load_model, save_pretrained
    from tokformer.transformer import Decoder, Encoder
    from tokformer.weights import count_parameters

__version__ = "0.1.0"

# Public name -> the module that defines it.
_LAZY = {
    "TokenBatch": "tokformer.batch",
    "TransformerConfig": "tokformer.config",
    "Embedder": "tokformer.embedding",
    "Encoder": "tokformer.transformer",
    "Decoder": "tokformer.transformer",
    "Seq2Seq": "tokformer.seq2seq",
    "count_parameters": "tokformer.weights",
    "train": "tokformer.engine",
    "evaluate": "tokformer.engine",
    "save_pretrained": "tokformer.store",
    "from_pretrained": "tokformer.store",
    "load_model": "tokformer.store",
    "load": "tokformer.store",
}
__all__ = ["TokenBatch", "TransformerConfig", "Embedder", "Encoder", "Decoder", "Seq2Seq", "count_parameters",
           "train", "evaluate", "save_pretrained", "from_pretrained", "load_model", "load"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tokformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
