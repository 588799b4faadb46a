"""Task ``vqa``: answer a question about a picture (or, without a question, describe it).

One sequence per example: the picture's patch tokens (2-D positions), the question's BPE tokens,
the answer's tokens, each typed by its segment; bidirectional attention over picture + question,
causal over the answer (:class:`~tokformer.vision_language.VisionLanguageModel`, PaliGemma's
layout); the loss is on the answer's tokens only.

Data (``data``): ``birds`` (built in: questions about bird scenes, ``tasks/vqa_data.py``) or a
folder of JSONL files, ``{"image": "relative/path.png", "question": "...", "answer": "..."}`` a line
(``DIR/*.jsonl`` with a seeded held-out share, or ``DIR/train/*.jsonl`` and ``DIR/val/*.jsonl``).

Metrics: ``exact`` (the whole answer right: under teacher forcing, every answer token and the
end token the argmax, which is exactly when greedy decoding produces the answer) and
``token_accuracy``; on the built-in data, evaluation adds ``exact`` per question type and on the
held-out phrasings and (type, quadrant) combinations. Baselines: the question alone (the most
frequent training answer to the same question, else to its type, else overall) and the most
frequent answer. ``tokformer predict RUN image.png --prompt "how many birds?"`` answers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer import files
from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.engine import (
    TOKENIZER_DIR,
    Dist,
    Predictor,
    StepOutput,
    Task,
    barrier,
    check_data_fits,
    help_text,
    load,
    positive_count,
    register_task,
    write_text_atomic,
)
from tokformer.errors import ConfigError, DataError, UsageError
from tokformer.positional import LearnedPositions
from tokformer.sampling import SamplingConfig
from tokformer.tasks import vqa_data
from tokformer.tasks.birds.models import LEARNED_POSITION_STD
from tokformer.tokenizers.bpe import BPETokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer, is_one_image
from tokformer.tokenizers.image_local import LocalPatchTokenizer
from tokformer.tokenizers.registry import load_tokenizer
from tokformer.vision_language import VisionLanguageModel, generate_answers

TEXT_DIR = "text_tokenizer"
QUESTION_ONLY_FILE = "question_only.json"  # the question-only baseline, saved with the model
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
IGNORE = -100  # target of padding: no loss, no metric


@dataclass
class VQAConfig:
    data: str = field(default="birds", metadata=help_text(
        "birds (built in: questions about bird scenes) or a folder of JSONL files", path=("birds",)))
    val_fraction: float = field(default=0.1, metadata=help_text("held-out share of a folder without train/ and val/"))
    train_size: int = field(default=20000, metadata=help_text("built-in data: training examples"))
    eval_size: int = field(default=2000, metadata=help_text("built-in data: evaluation examples"))
    data_seed: int = field(default=1234, metadata=help_text("seed of the built-in data and of folder splits"))
    image_size: int = field(default=64, metadata=help_text("image side in pixels", architecture=True))
    patch_size: int = field(default=32, metadata=help_text(
        "patch side in pixels (32: one quadrant, its whole bird, per patch at 64 px)", architecture=True))
    tokenizer: Literal["local", "linear"] = field(default="local", metadata=help_text(
        "patch embedding: local (a small CNN per patch) or linear (a plain ViT)", architecture=True))
    position: Literal["sincos", "learned"] = field(default="sincos", metadata=help_text(
        "picture tokens' position code: sincos (fixed 2-D) or learned (a table, one entry per patch)",
        architecture=True))
    cnn_width: int = field(default=8, metadata=help_text("local tokenizer: channels of its first conv",
                                                         architecture=True))
    cnn_depth: int = field(default=2, metadata=help_text("local tokenizer: conv stages", architecture=True))
    vocab_size: int = field(default=400, metadata=help_text(
        "BPE vocabulary of questions and answers, learnt from the training texts", architecture=True))
    max_question_tokens: int = field(default=32, metadata=help_text("longest question (longer ones are cut)",
                                                                    architecture=True))
    max_answer_tokens: int = field(default=16, metadata=help_text("longest answer (longer ones are cut)",
                                                                  architecture=True))
    d_model: int = field(default=64, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads", architecture=True))
    n_layers: int = field(default=2, metadata=help_text("Transformer blocks", architecture=True))
    d_ff: int | None = field(default=None, metadata=help_text("feed-forward width (default 4*d_model)",
                                                              architecture=True))
    dropout: float = field(default=0.0, metadata=help_text("dropout"))
    use_question: bool = field(default=True, metadata=help_text(
        "feed the question; off, the model sees the picture alone (the image-only baseline)"))

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:  # 0 would leave nothing to evaluate on
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        for name in ("train_size", "eval_size", "max_question_tokens", "max_answer_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.vocab_size < 256 + 3:
            raise ValueError(f"vocab_size must be at least 259 (256 bytes and 3 special tokens), got {self.vocab_size}")
        self.build_image_tokenizer()  # validate the shapes now, not halfway into a run
        self.transformer()

    @property
    def builtin(self) -> bool:
        return self.data == "birds"

    @property
    def text_length(self) -> int:
        """Longest text the BPE batches: a question, or an answer after its BOS."""
        return max(self.max_question_tokens, self.max_answer_tokens + 1)

    def build_image_tokenizer(self) -> ImagePatchTokenizer:
        if self.tokenizer == "local":
            return LocalPatchTokenizer(self.patch_size, self.image_size, cnn_width=self.cnn_width,
                                       cnn_depth=self.cnn_depth, class_token=False, position=self.position)
        return ImagePatchTokenizer(self.patch_size, self.image_size, class_token=False, position=self.position)

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers, d_ff=self.d_ff,
                                 dropout=self.dropout, activation="gelu")


@dataclass(frozen=True)
class Example:
    """One item: an image (tensor, PIL image or path), the question ("" to caption), the answer, and,
    for the built-in data, the question type and whether its phrasing / combination is held out."""

    image: Any
    question: str
    answer: str
    kind: str = ""
    held_phrasing: bool = False
    held_combo: bool = False


@dataclass(frozen=True)
class QuestionOnly:
    """The question-only ("blind") baseline: the most frequent training answer to each question, to each
    question type, and overall. Saved beside the tokenizers, so evaluating a model folder on new data
    needs no training data."""

    by_question: dict[str, str]
    by_kind: dict[str, str]
    overall: str

    @classmethod
    def fit(cls, train: Sequence[Example]) -> QuestionOnly:
        by_question, by_kind = defaultdict(Counter), defaultdict(Counter)
        for e in train:
            by_question[e.question][e.answer] += 1
            by_kind[e.kind][e.answer] += 1
        top = lambda counts: counts.most_common(1)[0][0]  # ties: the answer seen first
        return cls({q: top(c) for q, c in by_question.items()}, {k: top(c) for k, c in by_kind.items()},
                   top(Counter(e.answer for e in train)))

    def guess(self, example: Example) -> str:
        """The answer to the same question, else to its type, else the most frequent one."""
        return self.by_question.get(example.question) or self.by_kind.get(example.kind) or self.overall

    def save(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(dataclasses.asdict(self), indent=0, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path) -> QuestionOnly:
        saved = files.read_json(path)
        maps = [saved.get(name) if isinstance(saved, dict) else None for name in ("by_question", "by_kind")]
        if not (all(isinstance(m, dict) and all(isinstance(v, str) for v in m.values()) for m in maps)
                and isinstance(saved.get("overall"), str)):
            raise DataError(f'{path}: expected {{"by_question": {{question: answer}}, "by_kind": {{type: answer}}, '
                            '"overall": answer}')
        return cls(maps[0], maps[1], saved["overall"])


class Examples(Dataset):
    """Examples; a user's image files are read when used, by ``load`` (the image tokenizer's: at the
    model's size, so a batch never holds the files at their full size)."""

    def __init__(self, examples: list[Example], load: Callable[[Path], Any]) -> None:
        self.examples, self.load = examples, load

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        example = self.examples[i]
        if isinstance(example.image, Path):  # user data: read when used
            return dataclasses.replace(example, image=self.load(example.image))
        return example


#: Built-in scenes drawn at once: the generator's float canvas of all 20,000 training scenes at
#: once peaked at 4.4 GB; chunk ``k`` is the generator's independent stream ``k``.
SCENES_PER_CHUNK = 1000


def builtin_example_bytes(size: int) -> int:
    """Memory one built-in example holds: its ``size`` x ``size`` RGB picture and about 1 kB of text and
    bookkeeping (the Example, its strings, flags)."""
    return 3 * size * size + 1024


def check_builtin_fits(c: VQAConfig) -> None:
    """Refuse built-in data sizes whose scenes cannot fit in memory, before drawing any (they are drawn up
    front, so a few digits of ``--train-size`` could ask for a terabyte). Checked when the data are made,
    not when a config is read: a trained model loads on a smaller machine."""
    check_data_fits((c.train_size + c.eval_size) * builtin_example_bytes(c.image_size),
                    f"train_size + eval_size = {c.train_size + c.eval_size:,} built-in examples")


def builtin_examples(n: int, seed: int, split: str, size: int) -> list[Example]:
    """The first ``n`` examples of a built-in split, drawn ``SCENES_PER_CHUNK`` scenes at a time."""
    examples: list[Example] = []
    for chunk, start in enumerate(range(0, n, SCENES_PER_CHUNK)):
        data = vqa_data.bird_questions(min(SCENES_PER_CHUNK, n - start), seed, split, size=size, chunk=chunk)
        images = torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2)  # [m, 3, H, W] uint8
        held_phrasing, held_combo = data.held_out_phrasing, data.held_out_combo  # [m] each: computed once
        examples += [Example(images[i], data.questions[i], data.answers[i], data.kinds[i],
                             bool(held_phrasing[i]), bool(held_combo[i]))
                     for i in range(len(data.questions))]
    return examples


@register_task("vqa")
class VQATask(Task):
    """Image + question -> answer: cross-entropy on the answer's tokens; exact match of the answer."""

    Config = VQAConfig
    # chosen on the generator's val stream with cnn_width 8 (benchmarks/results/vqa_calibration.md): 9,000 steps
    # in about 8 minutes on 2 cores; the width-32 CNN fit 3,000, and the question-routing types need more
    train_defaults: ClassVar[dict[str, Any]] = {"steps": 9000, "batch_size": 32, "lr": 1e-3, "warmup_steps": 200,
                                                "eval_every": 1000}
    best_metric = "exact"
    higher_is_better = True
    run_files = (QUESTION_ONLY_FILE,)

    def __init__(self, config: VQAConfig) -> None:
        super().__init__(config)
        self.image_tokenizer = config.build_image_tokenizer()
        self.text: BPETokenizer | None = None
        self._question_only: QuestionOnly | None = None  # from the training split, or read with the model
        self._splits: dict[str, Examples] = {}

    # -- data ------------------------------------------------------------------------------

    def _split(self, which: Literal["train", "eval"]) -> Examples:
        """A split, made when first asked for: built-in ones each on their own (evaluating draws no
        training scenes), a folder's both at once (one is held out of the other)."""
        if which not in self._splits:
            c = self.config
            if c.builtin:
                check_builtin_fits(c)
                n, split = (c.train_size, "train") if which == "train" else (c.eval_size, "test")
                self._splits[which] = Examples(builtin_examples(n, c.data_seed, split, c.image_size),
                                                  self.image_tokenizer.read_at_size)
            else:
                records = vqa_data.read_folder(c.data, c.val_fraction, c.data_seed)
                train, evals = ([Example(r.image, r.question, r.answer) for r in part] for part in records)
                load = self.image_tokenizer.read_at_size
                self._splits |= {"train": Examples(train, load), "eval": Examples(evals, load)}
        return self._splits[which]

    def train_dataset(self) -> Examples:
        return self._split("train")

    def eval_dataset(self) -> Examples:
        return self._split("eval")

    @property
    def user_data(self) -> bool:
        return not self.config.builtin

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> Examples:
        """Every example of a JSONL file, or of a folder's evaluation split (its ``val``/``test``
        folder when it has ``train`` too, else all its ``*.jsonl``): ``tokformer evaluate RUN --data``."""
        return Examples([Example(r.image, r.question, r.answer) for r in vqa_data.read_eval(data)],
                        self.image_tokenizer.read_at_size)

    def question_only(self) -> QuestionOnly:
        """The question-only baseline: read with the model, else fitted on the training split."""
        if self._question_only is None:
            self._question_only = QuestionOnly.fit(self.train_dataset().examples)
        return self._question_only

    def baselines(self, eval_set: Examples) -> dict[str, dict[str, float]]:
        """The question alone: each evaluation question's most frequent training answer (to the same
        question, else to its type, else overall); and the most frequent training answer."""
        blind, evals = self.question_only(), eval_set.examples
        share = lambda right: sum(right) / max(len(evals), 1)
        return {"question only (most frequent answer to it)": {"exact": share(blind.guess(e) == e.answer
                                                                               for e in evals)},
                "most frequent answer": {"exact": share(blind.overall == e.answer for e in evals)}}

    # -- tokenizers --------------------------------------------------------------------------

    def setup(self, run_dir: Path, dist: Dist) -> None:
        """Rank 0 learns the BPE of the training questions and answers (unless loaded) and saves the
        tokenizers; the other processes wait and load them."""
        if self.text is None and dist.is_main:
            self.save_assets(run_dir)
        barrier(dist)
        if self.text is None:
            self.load_assets(run_dir)

    def text_tokenizer(self) -> BPETokenizer:
        if self.text is None:
            c = self.config
            texts = [t for e in self.train_dataset().examples for t in (e.question, e.answer) if t]
            self.text = BPETokenizer.train(texts, c.vocab_size, special_tokens=[BOS, EOS, PAD], pad_token=PAD,
                                           max_length=c.text_length)
        return self.text

    def tokenizer_dirs(self) -> tuple[str, ...]:
        return (TOKENIZER_DIR, TEXT_DIR)

    def save_assets(self, run_dir: Path) -> None:
        self.image_tokenizer.save(run_dir / TOKENIZER_DIR)
        self.text_tokenizer().save(run_dir / TEXT_DIR)
        self.question_only().save(run_dir / QUESTION_ONLY_FILE)

    def load_assets(self, run_dir: Path) -> None:
        image, text = load_tokenizer(run_dir / TOKENIZER_DIR), load_tokenizer(run_dir / TEXT_DIR)
        if not isinstance(image, ImagePatchTokenizer):
            raise DataError(f"{run_dir / TOKENIZER_DIR} is not an image tokenizer")
        if not isinstance(text, BPETokenizer) or not {BOS, EOS, PAD} <= set(text.special_tokens) \
                or text.pad_token != PAD:
            raise DataError(f"{run_dir / TEXT_DIR} is not a BPE tokenizer with {BOS}, {EOS} and {PAD} padding")
        self.image_tokenizer, self.text = image, text
        if (run_dir / QUESTION_ONLY_FILE).is_file():  # runs from before it was saved fit it on their data
            self._question_only = QuestionOnly.load(run_dir / QUESTION_ONLY_FILE)

    # -- batches, model, loss ------------------------------------------------------------------

    def collate(self, samples: list[Example], train: bool) -> dict[str, Any]:
        """Image, question and answer batches; ``targets`` ``[B, Na]``: each answer token's next token
        (the last one EOS), IGNORE under padding."""
        c, text = self.config, self.text_tokenizer()
        bos, eos, pad = (text.special_tokens[t] for t in (BOS, EOS, PAD))
        answers = [text.encode(s.answer)[: c.max_answer_tokens] for s in samples]
        width = max(len(a) for a in answers) + 1
        inputs = torch.full((len(samples), width), pad, dtype=torch.long)  # [B, Na]
        targets = torch.full((len(samples), width), IGNORE, dtype=torch.long)
        for row, ids in enumerate(answers):
            inputs[row, : len(ids) + 1] = torch.tensor([bos, *ids])
            targets[row, : len(ids) + 1] = torch.tensor([*ids, eos])
        answer = TokenBatch(ids=inputs, mask=targets != IGNORE, positions=torch.arange(width).expand(len(samples), -1))
        return {"image": self.image_tokenizer.batch([s.image for s in samples]),
                "prompt": self._questions([s.question for s in samples]), "answer": answer, "targets": targets,
                "kinds": [s.kind for s in samples], "held_phrasing": torch.tensor([s.held_phrasing for s in samples]),
                "held_combo": torch.tensor([s.held_combo for s in samples])}

    def _questions(self, questions: Sequence[str]) -> TokenBatch:
        """The questions' tokens; all padding (no question) when the model is trained without them."""
        text = self.text_tokenizer()
        if not self.config.use_question:
            questions = [""] * len(questions)
        return text.batch(list(questions), max_length=self.config.max_question_tokens, truncation=True)

    def build_model(self) -> VisionLanguageModel:
        return self._model(self.text_tokenizer().build_embedder(self.config.d_model, dropout=self.config.dropout))

    def planned_model(self) -> VisionLanguageModel:
        """The model with a text table of ``vocab_size`` rows, the most the BPE learns."""
        c = self.config
        return self._model(Embedder(c.d_model, vocab_size=c.vocab_size,
                                    position=LearnedPositions(c.d_model, c.text_length)))

    def _model(self, text_embedder: nn.Module) -> VisionLanguageModel:
        c = self.config
        nn.init.normal_(text_embedder.position.table.weight, std=0.01)  # GPT-2's wpe init
        # a learned table as long as a token, as the birds experiment measured
        image_embedder = self.image_tokenizer.build_embedder(c.d_model, dropout=c.dropout,
                                                             position_std=LEARNED_POSITION_STD)
        return VisionLanguageModel(image_embedder, text_embedder, c.transformer())

    def step(self, model: nn.Module, batch: dict[str, Any]) -> StepOutput:
        logits = model(batch["image"], batch["prompt"], batch["answer"]).float()  # [B, Na, V]
        targets = batch["targets"]  # [B, Na]
        real = targets != IGNORE
        loss = F.cross_entropy(logits[real], targets[real])
        choices = logits.detach().clone()
        choices[..., self._never_answered()] = torch.finfo(choices.dtype).min  # as decoding chooses (predict)
        correct = (choices.argmax(-1) == targets) | ~real  # [B, Na]
        exact = correct.all(dim=1)  # [B] the whole answer, and where it ends
        metrics = {"exact": (exact.sum(), len(exact)), "token_accuracy": ((correct & real).sum(), real.sum())}
        if not model.training and self.config.builtin:
            metrics |= _breakdown(exact, batch)
        return StepOutput(loss=loss, metrics=metrics, count=len(exact), outputs=exact)

    # -- inference -------------------------------------------------------------------------

    def predict(self, model: nn.Module, inputs: Sequence[Any], prompt: str | None = "",
                max_new_tokens: int | None = None) -> list[str]:
        """The answer to ``prompt`` (one question for every image; "" or None describes it, as
        ``tokformer predict`` without ``--prompt`` does) for each image (file paths, PIL images or
        ``[3, H, W]`` tensors), decoded greedily. ``max_new_tokens`` (default: the config's
        ``max_answer_tokens``) must be at least 1; more than the answer positions the model learned
        (``text_length``) is capped there, where every answer ends anyway."""
        prompt = _prompt(prompt)
        max_new_tokens = self._answer_budget(model, max_new_tokens)
        if prompt and not self.config.use_question:
            raise ConfigError("this model was trained without questions (use_question false): leave the prompt out")
        text = self.text_tokenizer()
        device = next(model.parameters()).device
        image = self.image_tokenizer.batch(list(inputs)).to(device)
        question = self._questions([prompt] * len(inputs)).to(device)
        answers = generate_answers(model, image, question, bos_id=text.special_tokens[BOS],
                                   eos_id=text.special_tokens[EOS],
                                   max_new_tokens=max_new_tokens,
                                   sampling=SamplingConfig(temperature=0.0), suppress=self._never_answered())
        return [text.decode(a) for a in answers]

    def _answer_budget(self, model: nn.Module, max_new_tokens: int | None) -> int:
        """The most answer tokens to decode: ``max_new_tokens`` (the config's ``max_answer_tokens`` when
        None) capped at the answer positions of ``model``'s text table. 0 and negatives are a UsageError:
        0 meant the default (``or``) and -5 decoded nothing; past the table, the positional embedding
        raised ``position 32 is beyond the learned table's max_len=32``."""
        if max_new_tokens is None:
            return self.config.max_answer_tokens
        table = getattr(model.segments.embedders["answer"], "position", None)
        most = getattr(table, "max_len", self.config.text_length)  # the answer positions it learned
        return min(positive_count("max_new_tokens", max_new_tokens), most)

    def _never_answered(self) -> list[int]:
        """Ids no answer holds, so neither decoding nor the exact-match metric may choose them: BOS and
        padding (an undertrained model printed a raw ``<|bos|>``)."""
        return [self.text_tokenizer().special_tokens[t] for t in (BOS, PAD)]

    def is_one_input(self, value: Any) -> bool:
        return super().is_one_input(value) or is_one_image(value)

    def show_prediction(self, source: str, prediction: str) -> str:
        return prediction

    def export_example(self) -> tuple[TokenBatch, ...]:
        """``model(*args)`` to trace: two random images, a question and a two-token answer, collated as
        for training (2 samples, so the traced batch dimension stays dynamic)."""
        images = torch.randint(0, 256, (2, 3, *self.image_tokenizer.image_size), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0))
        batch = self.collate([Example(images[0], "how many birds?", "two"), Example(images[1], "", "a bird")], False)
        return batch["image"], batch["prompt"], batch["answer"]


def _prompt(prompt: object) -> str:
    """The question asked, stripped as training's questions are; None is no question (the model
    describes the picture, as ``tokformer predict`` without ``--prompt``), anything but text a UsageError."""
    if prompt is None:
        return ""
    if not isinstance(prompt, str):
        raise UsageError(f"prompt must be a question (a string) or None, got {prompt!r}")
    return prompt.strip()


def _breakdown(exact: Tensor, batch: dict[str, Any]) -> dict[str, tuple[Tensor, int]]:
    """Exact match per question type, on the held-out phrasings / combinations vs the rest, and per type
    on the rest alone (``exact_seen_count``, ...): a type's score over every phrasing mixes how well the
    model answers with whether it reads a phrasing it never trained on."""
    kinds = {kind: torch.tensor([k == kind for k in batch["kinds"]]) for kind in vqa_data.QUESTION_TYPES}
    seen = ~(batch["held_phrasing"] | batch["held_combo"])
    groups = {f"exact_{kind}": rows for kind, rows in kinds.items()}
    groups |= {"exact_held_phrasing": batch["held_phrasing"], "exact_held_combo": batch["held_combo"],
               "exact_seen": seen}
    groups |= {f"exact_seen_{kind}": rows & seen for kind, rows in kinds.items()}
    return {name: (exact[rows.to(exact.device)].sum(), int(rows.sum())) for name, rows in groups.items()}


def answer(source: str | os.PathLike | Predictor, images: Sequence[Any], question: str = "", *,
           checkpoint: str = "best", device: str = "cpu") -> list[str] | str:
    """Answers to ``question`` about each image: the Python form of ``tokformer predict RUN --prompt``.
    A single image (a path, a PIL image, a ``[3, H, W]`` tensor) gets its answer alone, not a list."""
    predictor = source if isinstance(source, Predictor) else load(source, checkpoint, device)
    if not isinstance(predictor.task, VQATask):
        raise ConfigError("the model is not a vqa model")
    return predictor(images, prompt=question)
