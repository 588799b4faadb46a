"""Task ``lm``: autoregressive language modeling on text, and text generation.

Byte-level BPE tokenizer (trained on the corpus, or loaded from ``tokenizer``) ->
decoder-only Transformer (:class:`~tokformer.language_model.CausalLM`: causal mask,
optionally tied embeddings) -> next-token cross-entropy. Documents are packed into one
stream with end-of-text separators and kept on disk as a memory-mapped array of ids in
the run directory (see :mod:`.lm_data`). With no ``data`` the corpus is the Python
standard library's own source, so ``tokformer train lm`` works offline on any machine.

The engine's eval ``loss`` is the exact mean next-token NLL over the held-out tokens
(each step reports its loss with ``count`` = its number of target tokens), so held-out
perplexity is ``exp(loss)``; :func:`perplexity` computes it together with the unigram
baseline. :func:`generate_text` is the Python form of ``tokformer generate``.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import logging
import math
import os
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import BlockOptions, TransformerConfig
from tokformer.engine import (
    LOGGER,
    TOKENIZER_DIR,
    Dist,
    StepOutput,
    Task,
    barrier,
    evaluate_model,
    help_text,
    load_model,
    local,
    positive_count,
    read_json_object,
    register_task,
    saved_task_name,
    write_json_atomic,
)
from tokformer.errors import ConfigError, DataError, UsageError
from tokformer.generation import generate, left_pad
from tokformer.language_model import CausalLM
from tokformer.sampling import SamplingConfig
from tokformer.tasks import lm_data, lm_shards
from tokformer.tasks.lm_data import EOT
from tokformer.tokenizers.bpe import BPETokenizer

UNIGRAM = "unigram model of the training split (add-one smoothed token frequencies)"
CORPUS_DIR = "corpus"
SHARDS_RECORD = "shards.json"  # a run on prepared shards: the index it started on
log = logging.getLogger(LOGGER)


@dataclass
class LMConfig(BlockOptions):
    data: str = field(default="stdlib",
        metadata=help_text("stdlib (built in), comma-separated files, folders, globs, or a shards dir "
                           "(tokformer data prepare lm)", path=(lm_data.STDLIB,), path_list=True))
    stdlib_bytes: int = field(default=lm_data.STDLIB_BYTES,
                              metadata=help_text("size of the built-in stdlib corpus in bytes"))
    tokenizer: str = field(default="", metadata=help_text("saved BPE tokenizer dir to use (default: train one)",
                                                                       path=()))
    vocab_size: int = field(default=lm_data.VOCAB_SIZE,
                            metadata=help_text("BPE vocabulary size when training the tokenizer"))
    tokenizer_chars: int = field(default=lm_data.TOKENIZER_CHARS,
                                 metadata=help_text("characters of the corpus the BPE trains on"))
    val_fraction: float = field(default=0.05, metadata=help_text("held-out share of the tokens (whole documents)"))
    data_seed: int = field(default=lm_data.DATA_SEED, metadata=help_text("seed of the document order"))
    context_len: int = field(default=64,
        metadata=help_text("tokens the model sees (training window, max length)", architecture=True))
    d_model: int = field(default=128, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads (must divide d_model)", architecture=True))
    n_layers: int = field(default=2, metadata=help_text("decoder blocks", architecture=True))
    d_ff: int | None = field(default=None,
        metadata=help_text("feed-forward width (default 4*d_model)", architecture=True))
    dropout: float = field(default=0.1, metadata=help_text(
        "dropout; 0.1 keeps a small corpus (~200 KB) from being overfitted within the default budget"))
    tie_embeddings: bool = field(default=True,
        metadata=help_text("share the input embedding with the output layer", architecture=True))
    position: Literal["learned", "rope", "none"] = field(default="learned", metadata=help_text(
        "learned table (GPT-2), rope (rotary, Llama) or none", architecture=True))
    rope_theta: float = field(default=10000.0,
        metadata=help_text("rotary frequency base (position=rope)", architecture=True))
    activation: str = field(default="gelu", metadata=help_text(
        "feed-forward activation: gelu, gelu_tanh, quick_gelu, relu, silu", architecture=True))
    norm_eps: float = field(default=1e-5, metadata=help_text("norm epsilon", architecture=True))
    bos_token: str | None = field(default=EOT, metadata=help_text(
        "token every prompt starts with, as training documents do (none: no prefix)", architecture=True))
    eos_token: str | None = field(default=EOT,
        metadata=help_text("token that ends a generated continuation", architecture=True))
    embedding_rows: int | None = field(default=None, metadata=help_text(
        "rows of the embedding table and output layer (default: the tokenizer's vocabulary; a loaded model may pad)",
        architecture=True))

    def __post_init__(self) -> None:
        for name in ("stdlib_bytes", "vocab_size", "tokenizer_chars", "context_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        self.transformer()  # validate the model shape now, not halfway into a run

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers, d_ff=self.d_ff,
                                 dropout=self.dropout, activation=self.activation, norm_first=True,
                                 norm_eps=self.norm_eps, rope="1d" if self.position == "rope" else "none",
                                 rope_theta=self.rope_theta, **self.block_options())


def build_lm(tokenizer: BPETokenizer, cfg: LMConfig) -> CausalLM:
    """The decoder-only model for ``tokenizer``'s vocabulary; positions up to ``context_len``."""
    tokenizer.max_length = cfg.context_len
    rows = cfg.embedding_rows or tokenizer.vocab_size
    if rows < tokenizer.vocab_size:
        raise ConfigError(f"embedding_rows={rows} is fewer than the tokenizer's {tokenizer.vocab_size} tokens")
    embedder = tokenizer.build_embedder(cfg.d_model, dropout=cfg.dropout, positions=cfg.position == "learned",
                                        rows=rows)
    return CausalLM(embedder, cfg.transformer(), rows, tie_embeddings=cfg.tie_embeddings)  # initialised by its parts


def token_nll(model: nn.Module, windows: Tensor) -> tuple[Tensor, int]:
    """Summed next-token NLL over ``windows`` ``[B, T+1]`` and the number of targets ``B*T``.

    A sum, not a mean, so callers average over tokens exactly, whatever the batch sizes.
    """
    inputs, targets = windows[:, :-1], windows[:, 1:]  # [B, T] each
    logits = model(TokenBatch.unpadded(inputs), padded=False).float()  # [B, T, V]; packed windows hold no padding
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
    return nll, targets.numel()


@register_task("lm")
class LMTask(Task):
    """Language modeling: BPE + decoder-only Transformer; eval loss = held-out token NLL."""

    Config = LMConfig
    run_files = (f"{CORPUS_DIR}/{lm_data.CORPUS_FILE}", f"{CORPUS_DIR}/{lm_data.META_FILE}", SHARDS_RECORD)

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        self.tokenizer: BPETokenizer | None = None
        self.corpus: lm_data.TokenCorpus | lm_shards.ShardedCorpus | None = None

    # -- data ------------------------------------------------------------------------

    def setup(self, run_dir: Path, dist: Dist) -> None:
        """Tokenizer and packed corpus, made once: rank 0 trains the BPE (unless one was given or
        loaded) and packs the corpus into ``run_dir``, the other processes wait and load both.
        A run directory that already holds them (a resume, ``tokformer evaluate``) is reused.
        A ``data`` that is a shards directory is read where it is (:meth:`_setup_shards`)."""
        shards = lm_shards.find_shards(self.config.data)
        if shards is not None:
            self._setup_shards(run_dir, dist, shards)
            return
        corpus_dir = run_dir / CORPUS_DIR
        if dist.is_main and not (corpus_dir / lm_data.META_FILE).is_file():
            self._pack(run_dir, corpus_dir)
        barrier(dist)
        if self.tokenizer is None:
            self.tokenizer = BPETokenizer.load(run_dir / TOKENIZER_DIR)
        self.corpus = lm_data.TokenCorpus(corpus_dir)

    def _setup_shards(self, run_dir: Path, dist: Dist, shards: Path) -> None:
        """Stream a corpus prepared by ``tokformer data prepare lm``: nothing is copied or encoded.
        A new run takes the shards' tokenizer (or ``tokenizer``, if it is the same one) into
        ``run_dir``; a resumed run checks that its tokenizer is still the shards' one."""
        corpus = lm_shards.ShardedCorpus(shards, self.config.val_fraction)
        if self.tokenizer is None:  # a new run (resume and init_from brought one)
            if self.config.tokenizer:  # allowed when it is the shards' own; every rank checks, so none waits alone
                given = lm_data.load_tokenizer(self.config.tokenizer)
                corpus.check_tokenizer(given, f"tokenizer {self.config.tokenizer}")
            if dist.is_main:
                corpus.tokenizer().save(run_dir / TOKENIZER_DIR)
            barrier(dist)
            self.tokenizer = BPETokenizer.load(run_dir / TOKENIZER_DIR)
        corpus.check_tokenizer(self.tokenizer, f"the tokenizer of {run_dir} (or of init_from)")
        self._check_same_shards(run_dir, dist, shards, corpus)
        log.info("corpus: %d shards, %d tokens (%d held out)", len(corpus.index.shards), corpus.index.tokens,
                 corpus.index.tokens - corpus.eval_start)
        self.corpus = corpus

    def _check_same_shards(self, run_dir: Path, dist: Dist, shards: Path,
                           corpus: lm_shards.ShardedCorpus) -> None:
        """The run keeps a copy of the shard index it started on; a resumed run must find the same
        one, or its window order (a permutation of the windows the shards hold) would silently change."""
        record = run_dir / SHARDS_RECORD
        index = json.loads(json.dumps(dataclasses.asdict(corpus.index)))  # as read back: lists, not tuples
        if not record.is_file():
            if dist.is_main:
                write_json_atomic(record, index)
            barrier(dist)
        elif read_json_object(record) != index:
            raise ConfigError(f"{shards} was prepared again since {run_dir} started (its shard index differs from "
                              f"{record}); resuming needs the same shards, or start a new run")

    def _pack(self, run_dir: Path, corpus_dir: Path) -> None:
        """Encode the corpus into ``corpus_dir``, training (and saving) the tokenizer first if needed."""
        c = self.config
        paths = lm_data.resolve_sources(c.data, c.stdlib_bytes)
        random.Random(c.data_seed).shuffle(paths)
        if self.tokenizer is None:
            self.tokenizer = self._make_tokenizer(paths)
            self.tokenizer.save(run_dir / TOKENIZER_DIR)  # the other processes load it after the barrier
        log.info("encoding %d files", len(paths))
        meta = lm_data.pack_corpus(lm_data.iter_documents(paths), self.tokenizer.encode,
                                   self.tokenizer.token_to_id(EOT), self.tokenizer.vocab_size, corpus_dir,
                                   c.val_fraction, [str(p) for p in paths])
        log.info("corpus: %d documents, %d tokens (%d held out)", meta.documents, meta.tokens,
                 meta.tokens - meta.eval_start)

    def _prepared(self) -> lm_data.TokenCorpus | lm_shards.ShardedCorpus:
        if self.corpus is None:
            raise ConfigError("the lm task's data is made by setup(run_dir, dist): call it before asking for datasets")
        return self.corpus

    def _make_tokenizer(self, paths: list[Path]) -> BPETokenizer:
        c = self.config
        if c.tokenizer:
            return lm_data.load_tokenizer(c.tokenizer)
        return lm_data.train_tokenizer(paths, c.vocab_size, c.tokenizer_chars, c.data, max_length=c.context_len)

    def train_dataset(self) -> lm_data.WindowDataset:
        return lm_data.WindowDataset(self._prepared(), "train", self.config.context_len)

    def eval_dataset(self) -> lm_data.WindowDataset:
        return lm_data.WindowDataset(self._prepared(), "eval", self.config.context_len)

    def collate(self, samples: list[Tensor], train: bool) -> Tensor:
        """Windows stacked into ``[B, context_len + 1]``; an id past the vocabulary (a damaged or foreign
        corpus file) is a one-line DataError here rather than an index error inside the model."""
        windows = torch.stack(samples)  # [B, context_len + 1]
        if self.tokenizer is not None and windows.numel() and int(windows.max()) >= self.tokenizer.vocab_size:
            raise DataError(f"the corpus holds token id {int(windows.max())}, past the tokenizer's vocabulary of "
                            f"{self.tokenizer.vocab_size}: its files are damaged or were made with another tokenizer")
        return windows

    @property
    def user_data(self) -> bool:
        return self.config.data.strip() != lm_data.STDLIB

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> lm_data.WindowDataset:
        """Every token of ``data`` (files, folders, globs as the ``data`` option takes them), encoded
        with the run's tokenizer and packed into ``workdir`` by rank 0; or a shards directory made
        with the run's tokenizer, read where it is."""
        shards = lm_shards.find_shards(data)
        if shards is not None:
            corpus = lm_shards.ShardedCorpus(shards, self.config.val_fraction)
            assert self.tokenizer is not None, "setup loads the tokenizer"
            corpus.check_tokenizer(self.tokenizer, "the run's tokenizer")
            return lm_data.WindowDataset(corpus, "all", self.config.context_len)
        if dist.is_main:
            assert self.tokenizer is not None, "setup loads the tokenizer"
            paths = lm_data.resolve_sources(data, self.config.stdlib_bytes)
            lm_data.pack_corpus(lm_data.iter_documents(paths), self.tokenizer.encode, self.tokenizer.token_to_id(EOT),
                                self.tokenizer.vocab_size, workdir, self.config.val_fraction, [str(p) for p in paths])
        barrier(dist)
        return lm_data.WindowDataset(lm_data.TokenCorpus(workdir), "all", self.config.context_len)

    def baselines(self, eval_set: lm_data.WindowDataset) -> dict[str, dict[str, float]]:
        """The unigram model: token frequencies of the training split, add-one smoothed, scored on
        ``eval_set``'s target tokens (same tokenizer)."""
        assert self.tokenizer is not None, "setup loads the tokenizer"
        ppl = lm_data.unigram_perplexity(self._prepared(), self.tokenizer.vocab_size, eval_set.target_range,
                                         scored=eval_set.corpus)
        return {UNIGRAM: {"loss": math.log(ppl), "perplexity": ppl}}

    # -- model -----------------------------------------------------------------------

    def build_model(self) -> CausalLM:
        if self.tokenizer is None:
            raise ConfigError("the lm task has no tokenizer yet: run setup(run_dir, dist) or load_assets(run_dir)")
        return build_lm(self.tokenizer, self.config)

    def adopt(self, source: Task) -> dict[str, Any]:
        """Fine-tuning: the source's tokenizer (already loaded) must separate documents with
        ``<|endoftext|>``; its architecture options replace ours."""
        if self.config.tokenizer:
            raise ConfigError("init_from brings its own tokenizer: drop tokenizer=")
        if self.tokenizer is None or EOT not in self.tokenizer.special_tokens:
            raise ConfigError(f"the tokenizer of the init_from model has no {EOT} token to separate documents")
        return super().adopt(source)

    def step(self, model: nn.Module, batch: Tensor) -> StepOutput:
        nll, n = token_nll(model, batch)
        return StepOutput(loss=nll / n, count=n)

    def eval_batch(self, model: nn.Module, batch: Tensor, output: StepOutput) -> tuple[float, int]:
        return float(output.loss) * output.count, output.count  # (summed NLL, target tokens)

    def eval_end(self, outputs: list[tuple[float, int]]) -> dict[str, float]:
        """Held-out ``perplexity``: exp of the NLL summed over every target token of the pass."""
        total, count = map(sum, zip(*outputs, strict=True)) if outputs else (0.0, 0)
        return {"perplexity": math.exp(total / count)} if count else {}

    def predict(self, model: nn.Module, inputs: Sequence[str], **options: Any) -> list[str]:
        """The continuation of each prompt; ``options`` are :func:`generate_text`'s (``max_new_tokens``,
        ``temperature``, ``top_k``, ``top_p``, ``stop``, ``seed``, ``use_cache``, ``on_text``)."""
        if self.tokenizer is None:
            raise ConfigError("the lm task has no tokenizer: load it with load_assets (tokformer.load does)")
        c = self.config
        return generate_text(LoadedLM(self.tokenizer, model, c.context_len, c.bos_token, c.eos_token),
                             list(inputs), **options)

    def show_prediction(self, source: str, prediction: str) -> str:
        return source + prediction

    # -- assets ----------------------------------------------------------------------

    def save_assets(self, run_dir: Path) -> None:
        """The tokenizer (the packed corpus stays in the run directory only)."""
        assert self.tokenizer is not None
        self.tokenizer.save(run_dir / TOKENIZER_DIR)

    def load_assets(self, run_dir: Path) -> None:
        """The tokenizer (the corpus is setup's business: generation needs none)."""
        self.tokenizer = BPETokenizer.load(run_dir / TOKENIZER_DIR)

    def export_example(self) -> tuple[TokenBatch]:
        """``model(*args)`` arguments to trace for export: two texts of different lengths, tokenized
        and right-padded by the run's BPE, cut to the context (2 samples of several tokens, so the
        traced batch and sequence dimensions stay dynamic)."""
        assert self.tokenizer is not None, "load the task's assets (or build its data) first"
        texts = ["def add(a, b):\n    return a + b\n", "x = [1, 2]"]
        return (self.tokenizer.batch(texts, max_length=self.config.context_len, truncation=True),)


# -- inference ---------------------------------------------------------------------------


@dataclass
class LoadedLM:
    """A trained language model with its tokenizer: what generation and scoring need."""

    tokenizer: BPETokenizer
    model: CausalLM
    context_len: int
    bos_token: str | None = EOT
    eos_token: str | None = EOT

    @property
    def bos_id(self) -> int | None:
        """The token every prompt starts with (what training documents start after), or None."""
        return None if self.bos_token is None else self.tokenizer.token_to_id(self.bos_token)

    @property
    def eos_id(self) -> int | None:
        """The token that ends a continuation, or None."""
        return None if self.eos_token is None else self.tokenizer.token_to_id(self.eos_token)


def load_lm(path: str | os.PathLike, checkpoint: str = "best", device: str | torch.device = "cpu") -> LoadedLM:
    """Tokenizer and model of an ``lm`` run (weights of ``checkpoint``: best, latest or a step),
    a model folder (tokformer export) or a Hugging Face causal-LM folder."""
    name = saved_task_name(path)  # refuse another task's run before loading its weights
    if name not in (None, "lm"):
        raise UsageError(f"{path} is a run of task '{name}', not of 'lm'; generation needs a language model")
    task, model = load_model(path, checkpoint, device)
    if not isinstance(task, LMTask) or task.tokenizer is None:
        raise UsageError(f"{path} holds a '{type(task).__name__}' model, not a language model")
    c = task.config
    return LoadedLM(task.tokenizer, model, c.context_len, c.bos_token, c.eos_token)


def perplexity(run_dir: str | os.PathLike, *, checkpoint: str = "best", batch_size: int = 32,
               device: str = "cpu") -> dict[str, float]:
    """Held-out perplexity of an ``lm`` run's model (the engine's evaluation pass, see
    :meth:`LMTask.eval_end`) and of the unigram baseline (same tokenizer, same held-out target
    tokens): ``{"ppl", "unigram_ppl", "tokens"}``."""
    if saved_task_name(run_dir) != "lm":
        raise UsageError(f"{run_dir} is not a run of task 'lm'; perplexity needs a language-model run")
    task, model = load_model(run_dir, checkpoint, device)
    d = local(device)
    task.setup(Path(run_dir), d)
    dataset = task.eval_dataset()
    ppl = evaluate_model(task, model, dataset, d, batch_size, "fp32", show=False)["perplexity"]
    lo, hi = dataset.target_range
    return {"ppl": ppl, "unigram_ppl": task.baselines(dataset)[UNIGRAM]["perplexity"], "tokens": hi - lo}


class TextStream:
    """The text of one generated row, released in whole characters and cut at stop strings.

    Tokens are byte sequences that may split a UTF-8 character, so bytes go through an
    incremental decoder; text that could be the start of a stop string is held back
    until it is known not to be one, so a stream never shows part of a stop string.
    """

    def __init__(self, tokenizer: BPETokenizer, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, [s for s in stops if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self.text, self.emitted, self.done = "", 0, False

    def feed(self, token_id: int) -> str:
        """Add a token; return the text now safe to show."""
        if self.done:
            return ""
        before = len(self.text)
        self.text += self._decoder.decode(self.tokenizer.decode_bytes([token_id]))
        if self._cut(max(0, before - self._hold)):
            return self._release(len(self.text))
        return self._release(len(self.text) - self._hold)

    def finish(self) -> str:
        """End of generation: flush held-back text (and any incomplete character)."""
        if not self.done:
            self.text += self._decoder.decode(b"", final=True)
            self._cut(0)
            self.done = True
        return self._release(len(self.text))

    def _cut(self, start: int) -> bool:
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.text, self.done = self.text[: min(hits)], True
        return bool(hits)

    def _release(self, upto: int) -> str:
        piece = self.text[self.emitted : max(upto, self.emitted)]
        self.emitted += len(piece)
        return piece


def _fit_context(prompts: list[list[int]], context_len: int) -> list[list[int]]:
    """Prompts the model can read: one longer than the whole context keeps its last ``context_len``
    tokens, with a warning. Nothing else is shortened: generation slides past the context."""
    long = [len(p) for p in prompts if len(p) > context_len]
    if long:
        warnings.warn(f"a prompt of {max(long)} tokens is longer than the model's context of {context_len} "
                      f"tokens; keeping its last {context_len}", stacklevel=3)
    return [p[-context_len:] for p in prompts]


def generate_text(
    source: str | os.PathLike | LoadedLM,
    prompts: str | Sequence[str],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    stop: str | Sequence[str] = (),
    seed: int = 0,
    use_cache: bool = True,
    checkpoint: str = "best",
    device: str = "cpu",
    on_text: Callable[[int, str], None] | None = None,
) -> list[str]:
    """Continue each prompt with a trained language model; the Python form of ``tokformer generate``.

    Args:
        source: an ``lm`` run directory, a model folder, a Hugging Face causal-LM folder, or a
            :class:`LoadedLM` (see :func:`load_lm`).
        prompts: one text or several; several are generated as one left-padded batch and
            each gets exactly what it would get alone (greedy; sampling draws differ).
        max_new_tokens: the most tokens per prompt. Generation also ends at end-of-text.
        temperature: 0 is greedy decoding; otherwise logits are divided by it.
        top_k / top_p: sample only among the k most likely tokens / the nucleus of mass p.
        stop: strings that end a continuation; the text is cut before the first one.
        seed: seed of the sampling generator (same seed, same text).
        use_cache: keep past keys/values (fast); False recomputes the whole sequence per token.
        on_text: called with (prompt index, text) as whole characters become available: streaming.

    Every prompt is preceded by the model's ``bos_token`` (for a model trained here the
    end-of-text token, which documents start after in training; for a Hugging Face model
    what its tokenizer adds, often nothing). ``max_new_tokens`` may exceed the model's
    context: the window slides (see :func:`tokformer.generation.generate`). Only a prompt
    longer than the whole context is cut, from the left, with a warning. Returns the continuations (prompts excluded).
    """
    lm = source if isinstance(source, LoadedLM) else load_lm(source, checkpoint, device)
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not texts:
        raise UsageError("give at least one prompt")
    max_new_tokens = positive_count("max_new_tokens", max_new_tokens)  # None or 2.5 failed deep in the loop
    try:
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    except ValueError as err:
        raise UsageError(str(err)) from None
    stop = [stop] if isinstance(stop, str) else list(stop)
    prefix = [] if lm.bos_id is None else [lm.bos_id]
    encoded = [[*prefix, *lm.tokenizer.encode(t)] for t in texts]
    empty = [i + 1 for i, ids in enumerate(encoded) if not ids]
    if empty:  # nothing to continue from: this model has no start-of-text token to begin with
        raise UsageError(f"prompt {empty[0]} is empty and this model has no bos_token to start from; give some text")
    encoded = _fit_context(encoded, lm.context_len)
    ids, mask = left_pad(encoded)
    streams = [TextStream(lm.tokenizer, stop) for _ in texts]
    window = max((len(s.encode()) for s in stop if s), default=0)
    stop_fn = None
    if window:
        stop_fn = lambda new: any(s and s in lm.tokenizer.decode(new[-window:]) for s in stop)
    was_running = [True] * len(texts)

    def on_token(next_ids: Tensor, running: Tensor) -> None:
        for row, token in enumerate(next_ids.tolist()):
            if not was_running[row]:
                continue
            piece = streams[row].finish() if token == lm.eos_id else streams[row].feed(token)
            if piece and on_text is not None:
                on_text(row, piece)
            was_running[row] = bool(running[row])

    device_ = next(lm.model.parameters()).device
    generator = torch.Generator(device=device_).manual_seed(seed)
    generate(lm.model, ids, mask, max_new_tokens=max_new_tokens, sampling=sampling, eos_id=lm.eos_id, stop=stop_fn,
             use_cache=use_cache, generator=generator, on_token=on_token, context=lm.context_len,
             vocab_size=lm.tokenizer.vocab_size)
    for row, stream in enumerate(streams):
        piece = stream.finish()
        if piece and on_text is not None:
            on_text(row, piece)
    return [s.text for s in streams]


__all__ = ["LMConfig", "LMTask", "LoadedLM", "TextStream", "build_lm", "generate_text", "load_lm", "perplexity",
           "token_nll"]
