"""Bridges between tokformer models and other libraries and formats.

One module or package per counterpart (``export``: torch.export programs and ONNX files;
``hf``: Hugging Face models; ``timm``: timm's Vision Transformers). Nothing in the core
imports this package. Importing it registers the foreign formats the store can read
(:mod:`.formats`), which loads none of the converters: the optional dependencies they need
(onnx, onnxruntime, timm, ...) are only loaded by those who use them.
"""

from tokformer.interop import formats  # noqa: F401  (registers the formats into the store)
