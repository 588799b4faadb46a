"""tokformer: a general token-based Transformer framework.

Tokenizers (``tokformer.tokenizers``) turn any modality into a :class:`TokenBatch`; one
shared Transformer core mixes tokens; task heads (``tokformer.tasks``) read the result.
"""

from tokformer.batch import TokenBatch

__all__ = ["TokenBatch"]
__version__ = "0.1.0"
