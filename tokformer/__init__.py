"""tokformer: a general token-based Transformer framework.

Tokenizers (``tokformer.tokenizers``) turn any modality into a :class:`TokenBatch`; one
shared Transformer core mixes tokens; task heads (``tokformer.tasks``) read the result.
"""

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.engine import evaluate, train
from tokformer.transformer import Decoder, Encoder, EncoderDecoder
from tokformer.weights import count_parameters

__all__ = ["TokenBatch", "TransformerConfig", "Embedder", "Encoder", "Decoder", "EncoderDecoder", "count_parameters",
           "train", "evaluate"]
__version__ = "0.1.0"
