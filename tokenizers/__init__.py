"""Tokenizers: one module per modality, all written against the public tokenizer API."""
