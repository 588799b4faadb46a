"""The files the documents' snippets name, made offline and small: a user's images, texts,
parallel sentences and graphs, a Hugging Face folder and timm weights built at random by
their own libraries. Each document's sandbox gets its own copy (snippets write beside them);
the expensive ones are built once and linked.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import torch
from PIL import Image

from tokformer.tasks.numbers_de import english, german

TEXT = ("def add(a, b):\n    return a + b\n\nclass Foo:\n    pass\n\nimport os\n"
        "Once upon a time the quick brown fox jumped over the lazy dog. ") * 40
EOT = "<|endoftext|>"


def build_shared(shared: Path) -> None:
    """The expensive fixtures, once: a Hugging Face GPT-2 and Llama folder, timm weights."""
    staging = shared.with_name(shared.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _hf_folders(staging)
    _timm_files(staging)
    staging.rename(shared)


def populate(cwd: Path, shared: Path) -> None:
    """Write every fixture file into a new directory ``cwd``, with links to :func:`build_shared`'s."""
    cwd.mkdir(parents=True)
    _texts(cwd)
    _images(cwd)
    _pairs(cwd)
    _graphs(cwd)
    _questions(cwd)
    _sounds(cwd)
    for item in shared.iterdir():
        target = cwd / ("path/to" if item.name.startswith("hf-") or item.name == "timm-hub-folder" else "") / item.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(item, target_is_directory=item.is_dir())
    for alias in ("hf-gpt2-or-llama", "hf-gpt2"):
        (cwd / "path/to" / alias).symlink_to(shared / "hf-folder", target_is_directory=True)
    (cwd / "path/to/SmolLM-135M").symlink_to(shared / "hf-llama", target_is_directory=True)


def _texts(cwd: Path) -> None:
    for name in ("a.txt", "b.txt", "a.md"):
        (cwd / name).write_text(TEXT, encoding="utf-8")
    for folder in ("books", "notes", "more", "my_corpus"):
        (cwd / folder).mkdir()
        for i in range(3):
            (cwd / folder / f"{i}.txt").write_text(TEXT[i * 50:] + TEXT[: i * 50], encoding="utf-8")


def _image(seed: int, size: int = 40) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _images(cwd: Path) -> None:
    for i, name in enumerate(("image.png", "cat.png", "dog.png", "cat.jpg", "photo.jpg", "shape.png")):
        _image(i).save(cwd / name)
    for c, label in enumerate(("circle", "square")):
        (cwd / "my_images" / label).mkdir(parents=True)
        for i in range(8):
            _image(100 * c + i).save(cwd / "my_images" / label / f"{i}.png")


def _sounds(cwd: Path) -> None:
    """``clip.wav`` and ``my_sounds/train|val/CLASS/*.wav``: built-in event clips as a user's 8 kHz folder."""
    from tokformer.tasks.audio_data import EVENT_CLASSES, make_events, save_class_folders
    from tokformer.tokenizers.audio_io import write_wav

    clips, labels = make_events(24, seed=0, rate=8000)
    write_wav(cwd / "clip.wav", clips[0], 8000)
    names = [EVENT_CLASSES[label] for label in labels]
    save_class_folders(clips[:18], names[:18], 8000, cwd / "my_sounds" / "train")
    save_class_folders(clips[18:], names[18:], 8000, cwd / "my_sounds" / "val")


def _questions(cwd: Path) -> None:
    """``birds.png`` (a built-in vqa scene) and ``my_vqa/``: a JSONL folder of pictures, questions, answers."""
    from tokformer.tasks.vqa_data import bird_questions

    data = bird_questions(12, seed=0, split="sample")
    Image.fromarray(data.scenes.images[0]).save(cwd / "birds.png")
    (cwd / "my_vqa" / "images").mkdir(parents=True)
    lines = []
    for i in range(12):
        Image.fromarray(data.scenes.images[i]).save(cwd / "my_vqa" / "images" / f"{i}.png")
        lines.append(json.dumps({"image": f"images/{i}.png", "question": data.questions[i],
                                 "answer": data.answers[i]}))
    (cwd / "my_vqa" / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _pairs(cwd: Path) -> None:
    numbers = list(range(1, 81))
    lines = [(english(n), german(n)) for n in numbers]
    for name in ("train.tsv", "pairs.tsv"):
        (cwd / name).write_text("".join(f"{en}\t{de}\n" for en, de in lines), encoding="utf-8")
    for name, part in (("train.jsonl", lines), ("dev.jsonl", lines[:20])):
        (cwd / name).write_text("".join(json.dumps({"src": en, "tgt": de}) + "\n" for en, de in part),
                                encoding="utf-8")
    (cwd / "train.en").write_text("".join(en + "\n" for en, _ in lines), encoding="utf-8")
    (cwd / "train.de").write_text("".join(de + "\n" for _, de in lines), encoding="utf-8")
    (cwd / "in.txt").write_text("seven\ntwenty-one\n", encoding="utf-8")


def _molecule(seed: int, n: int) -> nx.Graph:
    rng = random.Random(seed)
    graph = nx.cycle_graph(n) if seed % 2 else nx.path_graph(n)
    for node in graph.nodes:
        graph.nodes[node]["atom"] = rng.choice("CNO")
        graph.nodes[node]["charge"] = rng.choice((-1, 0, 1))
    return graph


def _graphs(cwd: Path) -> None:
    nx.write_graphml(_molecule(1, 6), cwd / "molecule1.graphml")
    nx.write_gml(_molecule(2, 7), cwd / "molecule2.gml")
    for folder, size in (("my_graphs", 8), ("big", 120)):
        for c, label in enumerate(("a", "b")):
            (cwd / folder / label).mkdir(parents=True)
            for i in range(5):
                nx.write_graphml(_molecule(2 * i + c, size + i), cwd / folder / label / f"{i}.graphml")


def _hf_folders(shared: Path) -> None:
    """A random GPT-2 and a random Llama, built and saved by transformers, with a byte-level BPE."""
    import transformers

    from tokformer.tokenizers.bpe import BPETokenizer

    tokenizer = BPETokenizer.train([TEXT], 300, special_tokens=[EOT])
    shapes = {"hf-folder": ("gpt2", dict(n_embd=32, n_head=2, n_layer=1, n_positions=64)),
              "hf-llama": ("llama", dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))}
    for name, (model_type, overrides) in shapes.items():
        config = transformers.AutoConfig.for_model(model_type, vocab_size=320, eos_token_id=None,
                                                   bos_token_id=None, **overrides)
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(shared / name)
        tokenizer.save_hf_json(shared / name / "tokenizer.json")


def _timm_files(shared: Path) -> None:
    """Small timm ViTs under the names the documents use (the names say which family, not the size)."""
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.contiguous() for k, v in model.state_dict().items()}

    torch.manual_seed(0)
    small = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10)
    for name in ("vit_small.safetensors", "vit_tiny.safetensors"):
        save_file(weights(small), shared / name)
    torch.save(weights(VisionTransformer(img_size=384, patch_size=16, embed_dim=48, depth=1, num_heads=6)),
               shared / "vit.pth")
    hub = shared / "timm-hub-folder"
    hub.mkdir()
    save_file(weights(small), hub / "model.safetensors")
    (hub / "config.json").write_text(json.dumps({
        "architecture": "vit_tiny_test", "num_classes": 10, "global_pool": "token",
        "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.5] * 3, "std": [0.5] * 3}}))
