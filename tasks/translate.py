"""Task ``translate``: an encoder-decoder Transformer over BPE tokens, with beam search and BLEU.

The encoder reads the source bidirectionally; the decoder reads the target shifted right
(``<s> I love`` to predict ``I love you </s>``) with causal self-attention and cross-attends
to the encoder output (:class:`~tokformer.seq2seq.Seq2Seq`). Training minimises
label-smoothed cross-entropy over real target tokens; batches are bucketed by length.

Without data it learns English number phrases -> German number words
(:mod:`tokformer.tasks.numbers_de`), offline. Inference is one call::

    from tokformer.tasks.translate import translate
    translate("runs/translate-...", ["three hundred twenty-four"])  # ['dreihundertvierundzwanzig']

See docs/translation.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F
from sacrebleu.metrics.bleu import BLEU
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.beam_search import DecodeConfig, beam_search, greedy_decode
from tokformer.config import BlockOptions, TransformerConfig
from tokformer.engine import (
    LOGGER,
    TOKENIZER_DIR,
    Dist,
    Predictor,
    StepOutput,
    Task,
    barrier,
    check_data_fits,
    help_text,
    load,
    register_task,
)
from tokformer.errors import ConfigError, DataError
from tokformer.seq2seq import Seq2Seq
from tokformer.tasks.numbers_de import number_pairs, split_numbers
from tokformer.tasks.translate_data import (
    IGNORE_INDEX,
    Pair,
    TranslationBatch,
    TranslationDataset,
    collate_pairs,
    read_lines,
    read_pairs,
)
from tokformer.tokenizers.base import pad_ids
from tokformer.tokenizers.bpe import BPETokenizer
from tokformer.tokenizers.registry import load_tokenizer

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SRC_DIR, TGT_DIR = "tokenizer_src", "tokenizer_tgt"  # with shared_vocab=false; else the one TOKENIZER_DIR
log = logging.getLogger(LOGGER)


@dataclass
class TranslateConfig(BlockOptions):
    data: str | None = field(default=None, metadata=help_text(
        "training pairs: a .tsv (source<TAB>target), a .jsonl ({src, tgt}), or the source-side text "
        "file with data_tgt; none: English numbers -> German number words", path=()))
    data_tgt: str | None = field(default=None, metadata=help_text("target-side file aligned line by line with data",
                                                                                         path=()))
    eval_data: str | None = field(default=None, metadata=help_text("held-out pairs (same formats as data)",
                                                                                         path=()))
    eval_data_tgt: str | None = field(default=None, metadata=help_text("target-side file aligned with eval_data",
                                                                                              path=()))
    eval_fraction: float = field(default=0.05, metadata=help_text(
        "share of data held out when no eval_data is given"))
    train_size: int = field(default=60000, metadata=help_text("generated training pairs (default data only)"))
    eval_size: int = field(default=1000, metadata=help_text("generated held-out pairs (default data only)"))
    data_seed: int = field(default=1234, metadata=help_text("seed of data generation and held-out split"))
    vocab_size: int = field(default=420, metadata=help_text("BPE vocabulary per side (256 bytes + merges + 3)"))
    bpe_sample: int = field(default=10000, metadata=help_text("training pairs the BPE is learned from"))
    shared_vocab: bool = field(default=True, metadata=help_text("one BPE for source and target", architecture=True))
    share_embeddings: bool = field(default=True, metadata=help_text(
        "one embedding table for encoder, decoder and output (needs shared_vocab)", architecture=True))
    max_len: int = field(default=64, metadata=help_text("longest sentence in tokens, per side", architecture=True))
    too_long: Literal["error", "skip"] = field(default="skip", metadata=help_text(
        "a pair longer than max_len: skip (a warning counts them) or error (naming file:line)"))
    d_model: int = field(default=128, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads", architecture=True))
    encoder_layers: int = field(default=3, metadata=help_text("encoder blocks", architecture=True))
    decoder_layers: int = field(default=3, metadata=help_text("decoder blocks", architecture=True))
    d_ff: int | None = field(default=None,
        metadata=help_text("feed-forward width (default 4*d_model)", architecture=True))
    dropout: float = field(default=0.0, metadata=help_text(
        "dropout; 0 suits the default data (each pair is seen under twice), 0.1-0.3 small real corpora"))
    label_smoothing: float = field(default=0.1, metadata=help_text("label smoothing of the cross-entropy"))
    bucket_pool: int = field(default=50, metadata=help_text(
        "batches sorted by length together (length bucketing); 0: plain shuffle"))
    beam_size: int = field(default=4, metadata=help_text("default beam size of translate (1: greedy; at most 1024)"))
    length_penalty: float = field(default=1.0, metadata=help_text("default beam length penalty alpha (-10 to 10)"))
    max_len_a: float = field(default=1.5, metadata=help_text("output limit: max_len_a * source tokens + max_len_b"))
    max_len_b: int = field(default=10, metadata=help_text("output limit offset"))
    bleu_tokenize: str | None = field(default=None, metadata=help_text(
        "sacrebleu tokenizer of BLEU (13a, intl, char, zh, ...); default 13a, but char for the "
        "generated German numbers, which are single words"))

    def __post_init__(self) -> None:
        for name in ("train_size", "eval_size", "vocab_size", "bpe_sample", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.share_embeddings and not self.shared_vocab:
            raise ValueError("share_embeddings needs shared_vocab (one table can only serve one vocabulary)")
        if self.data_tgt is not None and self.data is None:
            raise ValueError("data_tgt needs data (the source-side file)")
        if self.eval_data_tgt is not None and self.eval_data is None:
            raise ValueError("eval_data_tgt needs eval_data (the source-side file)")
        if self.bleu_tokenize is not None and self.bleu_tokenize not in BLEU.TOKENIZERS:
            raise ValueError(f"bleu_tokenize must be one of {sorted(BLEU.TOKENIZERS)}, got {self.bleu_tokenize!r}")
        self.decode_config()
        self.stack(self.encoder_layers)

    def bleu_tokenizer(self) -> str:
        return self.bleu_tokenize or ("char" if self.data is None else "13a")

    def stack(self, layers: int) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=layers, d_ff=self.d_ff,
                                 dropout=self.dropout, **self.block_options())

    def decode_config(self, beam_size: int | None = None, length_penalty: float | None = None) -> DecodeConfig:
        """Decoding settings: the run's, with the caller's beam size and length penalty where given."""
        try:
            return DecodeConfig(beam_size=self.beam_size if beam_size is None else beam_size,
                                length_penalty=self.length_penalty if length_penalty is None else length_penalty,
                                max_len_a=self.max_len_a, max_len_b=self.max_len_b, max_len=self.max_len)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def _train_bpe(texts: list[str], c: TranslateConfig) -> BPETokenizer:
    # max_length + 1: the decoder input is <s> plus up to max_len tokens
    return BPETokenizer.train(texts, c.vocab_size, special_tokens=[PAD, BOS, EOS], pad_token=PAD,
                              max_length=c.max_len + 1)


@register_task("translate")
class TranslateTask(Task):
    """Encoder-decoder translation; eval reports token accuracy, and exact match, BLEU and chrF of the
    run's decoding (beam search, beam_size 4 by default)."""

    Config = TranslateConfig
    best_metric = "exact_match"
    higher_is_better = True
    # the default data is learned to high held-out exact match with these in a few CPU minutes
    train_defaults: ClassVar[dict[str, Any]] = {"steps": 1500, "batch_size": 64, "lr": 2e-3, "warmup_steps": 150,
                                                "eval_every": 500}

    def __init__(self, config: TranslateConfig) -> None:
        super().__init__(config)
        self.src_tok: BPETokenizer | None = None
        self.tgt_tok: BPETokenizer | None = None
        self._splits: tuple[list[Pair], list[Pair]] | None = None

    # ----------------------------------------------------------------- data

    def pairs(self) -> tuple[list[Pair], list[Pair]]:
        """(training, held-out) sentence pairs, read or generated once."""
        if self._splits is None:
            self._splits = self._read_splits()
        return self._splits

    def _read_splits(self) -> tuple[list[Pair], list[Pair]]:
        c = self.config
        if c.data is None:  # a generated pair, with its BPE ids, holds about 2 kB
            check_data_fits((c.train_size + c.eval_size) * 2048,
                            f"train_size + eval_size = {c.train_size + c.eval_size:,} generated sentence pairs")
            train, held_out = split_numbers(c.train_size, c.eval_size, c.data_seed)
            as_pairs = lambda numbers, split: [Pair(s, t, f"{split} number {n}")
                                               for n, (s, t) in zip(numbers, number_pairs(numbers), strict=True)]
            return as_pairs(train, "generated"), as_pairs(held_out, "held-out")
        pairs = read_pairs(c.data, c.data_tgt)
        if c.eval_data is not None:
            return pairs, read_pairs(c.eval_data, c.eval_data_tgt)
        order = np.random.default_rng(c.data_seed).permutation(len(pairs))
        n_eval = max(1, round(len(pairs) * c.eval_fraction))
        if n_eval >= len(pairs):
            raise DataError(f"{c.data} has {len(pairs)} pairs: too few to hold out {n_eval} for evaluation")
        held = set(order[:n_eval].tolist())
        return ([p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held])

    def tokenizers(self) -> tuple[BPETokenizer, BPETokenizer]:
        """(source, target) tokenizers: loaded by load_assets, else learned from training data."""
        if self.src_tok is None or self.tgt_tok is None:
            c = self.config
            sample = self.pairs()[0][: c.bpe_sample]
            if c.shared_vocab:
                self.src_tok = self.tgt_tok = _train_bpe([t for p in sample for t in (p.src, p.tgt)], c)
            else:
                self.src_tok = _train_bpe([p.src for p in sample], c)
                self.tgt_tok = _train_bpe([p.tgt for p in sample], c)
        return self.src_tok, self.tgt_tok

    def _dataset(self, pairs: list[Pair], split: str) -> TranslationDataset:
        """Encode pairs; a pair longer than max_len is skipped (a warning counts them) or, with
        ``too_long=error``, an error naming its origin."""
        src_tok, tgt_tok = self.tokenizers()
        src = src_tok.encode_batch([p.src for p in pairs], num_workers=1)
        tgt = tgt_tok.encode_batch([p.tgt for p in pairs], num_workers=1)
        limit, keep, skipped = self.config.max_len, [], []
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            if max(len(s), len(t)) <= limit:
                keep.append(i)
            elif self.config.too_long == "error":
                side, n = ("source", len(s)) if len(s) > limit else ("target", len(t))
                raise DataError(f"{pairs[i].origin}: {side} has {n} tokens > max_len {limit}; "
                                "raise max_len, or set too_long=skip to drop such pairs")
            else:
                skipped.append(pairs[i].origin)
        if not keep:
            raise DataError(f"none of the {len(pairs)} {split} pairs fits max_len {limit} "
                            f"(the first is {pairs[0].origin}); raise max_len")
        if skipped:
            log.warning("skipped %d of %d %s pairs longer than max_len %d tokens (the first: %s); "
                        "too_long=error stops instead", len(skipped), len(pairs), split, limit, skipped[0])
        return TranslationDataset([src[i] for i in keep], [tgt[i] for i in keep], self.config.bucket_pool)

    def epoch_order(self, dataset: TranslationDataset, generator: torch.Generator, global_batch: int) -> Tensor:
        return dataset.epoch_order(generator, global_batch)  # length bucketing

    def train_dataset(self) -> TranslationDataset:
        return self._dataset(self.pairs()[0], "training")

    def eval_dataset(self) -> TranslationDataset:
        return self._dataset(self.pairs()[1], "held-out")

    def setup(self, run_dir: Path, dist: Dist) -> None:
        """Rank 0 learns the BPE (unless loaded) and saves it; the other processes wait and load it."""
        if self.src_tok is None and dist.is_main:
            self.save_assets(run_dir)
        barrier(dist)
        if self.src_tok is None:
            self.load_assets(run_dir)

    def tokenizer_dirs(self) -> tuple[str, ...]:
        return (TOKENIZER_DIR,) if self.config.shared_vocab else (SRC_DIR, TGT_DIR)

    def collate(self, samples: list[tuple[list[int], list[int]]], train: bool) -> TranslationBatch:
        tok = self.tokenizers()[1]
        return collate_pairs(samples, tok.token_to_id(PAD), tok.token_to_id(BOS), tok.token_to_id(EOS))

    # ----------------------------------------------------------------- model and loss

    def build_model(self) -> Seq2Seq:
        c = self.config
        src_tok, tgt_tok = self.tokenizers()
        tgt_embedder = tgt_tok.build_embedder(c.d_model, dropout=c.dropout)
        src_embedder = tgt_embedder if c.share_embeddings else src_tok.build_embedder(c.d_model, dropout=c.dropout)
        for embedder in {id(e): e for e in (src_embedder, tgt_embedder)}.values():
            nn.init.normal_(embedder.position.table.weight, std=0.01)  # GPT-2's wpe init (tokens init themselves)
        return Seq2Seq(src_embedder, tgt_embedder, c.stack(c.encoder_layers), c.stack(c.decoder_layers),
                       tgt_tok.vocab_size, tie_output=c.share_embeddings)

    def step(self, model: nn.Module, batch: TranslationBatch) -> StepOutput:
        """Label-smoothed cross-entropy per real target token, and teacher-forced token accuracy."""
        logits = model(batch.src, batch.tgt_in).float()  # [B, N, V]
        labels = batch.labels  # [B, N]
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=self.config.label_smoothing)
        real = labels != IGNORE_INDEX
        correct = (logits.argmax(-1) == labels) & real
        return StepOutput(loss=loss, metrics={"token_accuracy": (correct.sum(), real.sum())}, count=int(real.sum()))

    def eval_batch(self, model: Seq2Seq, batch: TranslationBatch, output: StepOutput) -> list[tuple[list, list]]:
        """(translation, reference) ids of each pair, decoded as ``translate`` decodes (the run's beam
        size and length penalty): decoding, not teacher forcing, is what translation is judged by, and
        one decoding everywhere gives ``evaluate`` and ``translate --eval`` the same numbers."""
        tok = self.tokenizers()[1]
        cfg = self.config.decode_config()
        decode = greedy_decode if cfg.beam_size == 1 else beam_search
        hyps = decode(model, batch.src, tok.token_to_id(BOS), tok.token_to_id(EOS), cfg)
        refs = [row[row != IGNORE_INDEX][:-1].tolist() for row in batch.labels]  # drop </s>
        return list(zip(hyps, refs, strict=True))

    def eval_end(self, outputs: list[list[tuple[list, list]]]) -> dict[str, float]:
        """``exact_match`` (share of translations equal to the reference, 0-1), corpus ``bleu`` (sacrebleu,
        0-100, with the run's ``bleu_tokenize``) and ``chrf`` (0-100) over the whole held-out set."""
        pairs = [pair for batch in outputs for pair in batch]
        if not pairs:
            return {}
        tok = self.tokenizers()[1]
        hyps, refs = ([tok.decode(ids, skip_special_tokens=True) for ids in side] for side in zip(*pairs, strict=True))
        return self._pass_metrics(hyps, refs)

    def _pass_metrics(self, hyps: list[str], refs: list[str]) -> dict[str, float]:
        """:func:`score` with the run's BLEU tokenizer."""
        return score(hyps, refs, self.config.bleu_tokenizer())

    @property
    def user_data(self) -> bool:
        return self.config.data is not None

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> TranslationDataset:
        """Every pair of ``data`` (a .tsv or .jsonl file), encoded like the held-out split."""
        return self._dataset(read_pairs(data), "evaluation")

    def baselines(self, eval_set: TranslationDataset) -> dict[str, dict[str, float]]:
        """Copying the source sentence as the translation (what an untrained model can at best
        learn first), scored like the model's greedy translations."""
        src_tok, tgt_tok = self.tokenizers()
        copies = [src_tok.decode(ids, skip_special_tokens=True) for ids in eval_set.src]
        refs = [tgt_tok.decode(ids, skip_special_tokens=True) for ids in eval_set.tgt]
        return {"copy the source": self._pass_metrics(copies, refs)}

    # ----------------------------------------------------------------- assets

    def save_assets(self, run_dir: Path) -> None:
        for name, tok in zip(self.tokenizer_dirs(), self.tokenizers(), strict=False):  # shared: the one
            tok.save(run_dir / name)

    def load_assets(self, run_dir: Path) -> None:
        loaded = []
        for name in (self.tokenizer_dirs() * 2)[:2]:  # (source, target); shared: one directory for both
            tok = load_tokenizer(run_dir / name)
            if not isinstance(tok, BPETokenizer):
                raise DataError(f"{run_dir / name} is not a BPE tokenizer")
            loaded.append(tok)
        self.src_tok, self.tgt_tok = loaded

    def predict(self, model: nn.Module, inputs: Sequence[str], *, beam_size: int | None = None,
                length_penalty: float | None = None, batch_size: int = 64,
                on_batch: Callable[[int], None] | None = None) -> list[str]:
        """Translate ``inputs`` (same order out) with beam search (``beam_size=1``: greedy; default:
        the run's settings); ``on_batch(n)`` reports progress."""
        cfg = self.config.decode_config(beam_size, length_penalty)
        src_tok, tgt_tok = self.tokenizers()
        encoded = src_tok.encode_batch(list(inputs), num_workers=1)
        for i, ids in enumerate(encoded):
            if len(ids) > self.config.max_len:
                raise DataError(f"sentence {i + 1} has {len(ids)} tokens, more than the model's "
                                f"max_len {self.config.max_len}; split it")
            if not ids:
                raise DataError(f"sentence {i + 1} is empty")
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths batch together
        bos, eos, pad = tgt_tok.token_to_id(BOS), tgt_tok.token_to_id(EOS), src_tok.token_to_id(PAD)
        decode = greedy_decode if cfg.beam_size == 1 else beam_search
        device = next(model.parameters()).device
        out: list[str] = [""] * len(encoded)
        for lo in range(0, len(order), batch_size):
            rows = order[lo : lo + batch_size]
            src: TokenBatch = pad_ids([encoded[i] for i in rows], pad_id=pad).to(device)
            for i, ids in zip(rows, decode(model, src, bos, eos, cfg), strict=True):
                out[i] = tgt_tok.decode(ids, skip_special_tokens=True)
            if on_batch is not None:
                on_batch(len(rows))
        return out

    def export_example(self) -> tuple[TokenBatch, TokenBatch]:
        """``model(*args)`` arguments to trace for export: (source, shifted target) of two sentence
        pairs of different lengths, collated as for training (2 samples of several tokens per
        side, so the traced batch and both sequence dimensions stay dynamic)."""
        src_tok, tgt_tok = self.tokenizers()
        pairs = [("three hundred twenty-four", "dreihundertvierundzwanzig"), ("seven", "sieben")]
        limit = self.config.max_len
        batch = self.collate([(src_tok.encode(s)[:limit], tgt_tok.encode(t)[:limit]) for s, t in pairs], train=False)
        return batch.src, batch.tgt_in


def load_translator(source: str | os.PathLike | Predictor, checkpoint: str = "best", device: str = "cpu") -> Predictor:
    """``tokformer.load(source)``, refusing anything but a translate model; a Predictor passes through."""
    predictor = source if isinstance(source, Predictor) else load(source, checkpoint, device)
    if not isinstance(predictor.task, TranslateTask):
        raise ConfigError(f"{source} is a '{type(predictor.task).__name__}' model, not a translate model")
    return predictor


def translate(run_dir_or_model: str | os.PathLike | Predictor, sentences: Sequence[str], *,
              beam_size: int | None = None, length_penalty: float | None = None, batch_size: int = 64,
              checkpoint: str = "best", device: str = "cpu",
              on_batch: Callable[[int], None] | None = None) -> list[str] | str:
    """Translate sentences with a trained run; the Python form of ``tokformer translate``.

    Args:
        run_dir_or_model: a run directory of ``tokformer train translate``, a model folder, or the
            Predictor of ``tokformer.load(path)`` (load once for repeated calls).
        sentences: source sentences, one per item; a single string is one sentence, whose
            translation is returned alone (a string, not a list).
        beam_size: 1 is greedy decoding, 1024 the most; default: the run's ``beam_size`` (4).
        length_penalty: alpha of score / length**alpha, -10 to 10; default: the run's (1.0).
        batch_size: sentences decoded together.
        checkpoint / device: which weights to load (best, latest or a step), and where.
        on_batch: called with the number of sentences of each finished batch (progress).

    Returns:
        One translation per sentence, in order. Output length is limited to
        ``max_len_a * source tokens + max_len_b`` (run config) and to ``max_len``.
    """
    return load_translator(run_dir_or_model, checkpoint, device)(
        sentences, beam_size=beam_size, length_penalty=length_penalty, batch_size=batch_size, on_batch=on_batch)


def score(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> dict[str, float]:
    """Corpus BLEU (sacrebleu, with ``tokenize``) and chrF (sacrebleu defaults), both 0-100 as
    sacrebleu reports them, and exact match, the share (0-1) of hypotheses equal to their reference.
    Word BLEU of one-word sentences is 0 even when they are right (there are no 2- to 4-grams), so
    score compound words with ``tokenize="char"``."""
    refs = list(references)
    exact = sum(h == r for h, r in zip(hypotheses, refs, strict=True))
    return {"bleu": sacrebleu.corpus_bleu(list(hypotheses), [refs], tokenize=tokenize).score,
            "chrf": sacrebleu.corpus_chrf(list(hypotheses), [refs]).score,
            "exact_match": exact / max(1, len(refs))}


def held_out_scores(run_dir_or_model: str | os.PathLike | Predictor, *, beam_size: int | None = None,
             length_penalty: float | None = None, batch_size: int = 64, checkpoint: str = "best",
             device: str = "cpu", on_batch: Callable[[int], None] | None = None) -> dict[str, float | int]:
    """BLEU and chrF (0-100) and exact match (a share, 0-1) of a run on its task's held-out split,
    decoded as the run decodes (its beam size unless given), with ``sentences`` the count: the
    Python form of ``tokformer translate RUN_DIR --eval``, the same numbers ``tokformer evaluate``
    reports for the same decoding. BLEU uses the run's ``bleu_tokenize``."""
    predictor = load_translator(run_dir_or_model, checkpoint, device)
    held_out = predictor.task.pairs()[1]
    hyps = predictor([p.src for p in held_out], beam_size=beam_size, length_penalty=length_penalty,
                     batch_size=batch_size, on_batch=on_batch)
    return {**score(hyps, [p.tgt for p in held_out], predictor.task.config.bleu_tokenizer()),
            "sentences": len(held_out)}


def read_sentences(path: str | os.PathLike) -> list[str]:
    """One sentence per line of a UTF-8 file; an empty line is an error naming it
    (an output file must stay aligned line by line with its input)."""
    sentences = []
    for i, line in enumerate(read_lines(Path(path)), start=1):
        if not line.strip():
            raise DataError(f"{path}:{i}: empty line; give one sentence per line")
        sentences.append(line.strip())
    return sentences
