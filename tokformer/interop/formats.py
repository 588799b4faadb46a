"""The other libraries' model folders and files tokformer reads, registered into the store.

Each :class:`~tokformer.store.formats.Format` says how to recognise a folder (its parsed
``config.json``) or a lone weights file, and how to load it as a tokformer task and model.
The converters themselves are imported only when a folder of theirs is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokformer.store.formats import Format, register_format
from tokformer.store.source import Source

#: Weight files a timm model is distributed as (a ``.bin``/``.pth`` is read with ``weights_only``).
TIMM_WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")


def _load_hf(source: Source) -> tuple[Any, Any]:
    from tokformer.interop.hf import load_hf_folder

    return load_hf_folder(source.path)


HUGGING_FACE = register_format(Format(
    name="hf",
    description="a Hugging Face causal-LM folder",
    claims_config=lambda config: "model_type" in config,
    load=_load_hf,
))

# A timm model is an image backbone without tokformer's task around it (no class names, no
# tokenizer files): it starts a classify run (``--init-from``) rather than loading as a model.
TIMM = register_format(Format(
    name="timm",
    description="a timm image model's weights",
    claims_config=lambda config: "architecture" in config,
    claims_file=lambda path: Path(path).suffix in TIMM_WEIGHT_SUFFIXES,
))
