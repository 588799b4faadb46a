"""Bridges between tokformer models and other libraries and formats.

One module per counterpart (``export``: torch.export programs and ONNX files). Nothing in
the core imports this package, and this file imports none of its modules, so the optional
dependencies they need (onnx, onnxruntime, ...) are only loaded by those who use them.
"""
