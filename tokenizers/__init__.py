"""Tokenizers: one module per modality, all written against the public tokenizer API.

``load_tokenizer(dir)`` loads any saved tokenizer by the type named in its
``tokenizer_config.json``; ``register_tokenizer`` (or the ``tokformer.tokenizers``
entry-point group) makes a new tokenizer available by name.
"""

from tokformer.tokenizers.base import Tokenizer, TokenizerError, pad_features, pad_ids
from tokformer.tokenizers.bpe import BPETokenizer, SurrogateError
from tokformer.tokenizers.registry import (
    available_tokenizers,
    get_tokenizer_class,
    load_tokenizer,
    register_tokenizer,
)

__all__ = [
    "BPETokenizer",
    "SurrogateError",
    "Tokenizer",
    "TokenizerError",
    "available_tokenizers",
    "get_tokenizer_class",
    "load_tokenizer",
    "pad_features",
    "pad_ids",
    "register_tokenizer",
]
