"""Task translate on a tiny parallel set: it overfits, and decoding keeps its guarantees on a
trained model (beam 1 == greedy, cached == uncached, padding never changes a translation)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sacrebleu
import torch

from tokformer.batch import TokenBatch
from tokformer.beam_search import DecodeConfig, beam_search, greedy_decode
from tokformer.engine.trainer import evaluate_model
from tokformer.errors import DataError
from tokformer.runtime.distributed import local
from tokformer.store.loader import Predictor
from tokformer.tasks.numbers_de import english, german
from tokformer.tasks.translate import BOS, EOS, PAD, TranslateConfig, TranslateTask, score, translate
from tokformer.tokenizers.base import pad_ids

NUMBERS = [1, 2, 3, 5, 7, 12, 16, 20, 21, 34, 45, 99, 100, 101, 250, 324, 1000, 4012, 56789, 999999]
TINY = {"vocab_size": 300, "d_model": 48, "n_heads": 4, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0,
        "label_smoothing": 0.0, "eval_fraction": 0.2}


def write_numbers(path: Path, numbers: list[int]) -> Path:
    path.write_text("".join(f"{english(n)}\t{german(n)}\n" for n in numbers), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Predictor:
    """A 1+1-layer model trained to memorise 20 number pairs (full batch, Adam)."""
    torch.manual_seed(0)
    data = write_numbers(tmp_path_factory.mktemp("tr") / "numbers.tsv", NUMBERS)
    task = TranslateTask(TranslateConfig(data=str(data), eval_data=str(data), **TINY))
    dataset = task.train_dataset()
    batch = task.collate([dataset[i] for i in range(len(dataset))], train=True)
    model = task.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        loss = task.step(model, batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return Predictor(task, model.eval())


def sources(numbers: list[int]) -> list[str]:
    return [english(n) for n in numbers]


def src_batch(translator: Predictor, sentences: list[str]) -> TokenBatch:
    src_tok = translator.task.src_tok
    return pad_ids(src_tok.encode_batch(sentences, num_workers=1), pad_id=src_tok.token_to_id(PAD))


def test_model_overfits_a_small_parallel_set(trained: Predictor) -> None:
    for beam in (1, 4):
        out = translate(trained, sources(NUMBERS), beam_size=beam)
        assert out == [german(n) for n in NUMBERS]
        assert score(out, [german(n) for n in NUMBERS], tokenize="char") == pytest.approx(
            {"bleu": 100.0, "chrf": 100.0, "exact_match": 1.0})


@pytest.mark.parametrize("beam_size", [1, 3])
def test_eval_pass_scores_the_runs_decoding_like_sacrebleu(trained: Predictor, tmp_path: Path,
                                                            beam_size: int) -> None:
    """The engine's evaluation decodes in the task's eval hooks as ``translate`` does (the run's beam
    size): its exact_match (a share) and BLEU equal scoring those translations directly (held-out
    numbers the model partly gets wrong), so ``evaluate`` and ``translate --eval`` agree."""
    held_out = [4, 11, 30, 102, 333, 5000, 77]
    data = write_numbers(tmp_path / "train.tsv", NUMBERS)
    task = TranslateTask(TranslateConfig(data=str(data), eval_data=str(write_numbers(tmp_path / "e.tsv", held_out)),
                                         bleu_tokenize="char", **{**TINY, "beam_size": beam_size}))
    task.src_tok = task.tgt_tok = trained.task.src_tok
    metrics = evaluate_model(task, trained.model, task.eval_dataset(), local(), 3, "fp32", show=False)
    hyps = task.predict(trained.model, sources(held_out))  # the run's decoding: no override
    refs = [german(n) for n in held_out]
    assert metrics["exact_match"] == pytest.approx(sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(refs))
    assert metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="char").score)
    assert 0 < metrics["bleu"] < 100


def test_beam_size_one_equals_greedy_at_task_level(trained: Predictor) -> None:
    sentences = sources([*NUMBERS, 77, 123456, 808, 31000])  # unseen ones too: outputs need not be right
    src = src_batch(trained, sentences)
    bos, eos = trained.task.tgt_tok.token_to_id(BOS), trained.task.tgt_tok.token_to_id(EOS)
    cfg = DecodeConfig(beam_size=1, max_len=trained.task.config.max_len)
    assert beam_search(trained.model, src, bos, eos, cfg) == greedy_decode(trained.model, src, bos, eos, cfg)


def test_cached_decoding_equals_full_recomputation(trained: Predictor) -> None:
    sentences = sources([324, 56789, 999999, 5, 4321])
    src = src_batch(trained, sentences)
    bos, eos = trained.task.tgt_tok.token_to_id(BOS), trained.task.tgt_tok.token_to_id(EOS)
    cfg = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=12)
    cached = greedy_decode(trained.model, src, bos, eos, cfg)
    with torch.no_grad():
        memory = trained.model.encode(src)
        prefix = torch.full((len(sentences), 1), bos)
        for _ in range(12):  # no cache: the whole prefix through the decoder at every step
            tgt = TokenBatch(mask=torch.ones_like(prefix, dtype=torch.bool), ids=prefix,
                             positions=torch.arange(prefix.shape[1]).expand_as(prefix))
            nxt = trained.model.decode(tgt, memory, src.mask)[:, -1].argmax(-1)
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    for row, out in zip(prefix[:, 1:].tolist(), cached, strict=True):
        full = row[: row.index(eos)] if eos in row else row
        assert out == full


@pytest.mark.parametrize("beam", [1, 4])
def test_source_padding_never_changes_a_translation(trained: Predictor, beam: int) -> None:
    short = sources([7, 21, 324])
    alone = [translate(trained, [s], beam_size=beam)[0] for s in short]
    longest = "nine hundred ninety-nine thousand nine hundred ninety-nine"
    together = translate(trained, [*short, longest], beam_size=beam, batch_size=8)
    assert together[:3] == alone


def test_too_long_sentences_follow_the_policy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "d.tsv"
    data.write_text("one\teins\n" * 10 + "nine hundred ninety-nine thousand\tneunhundertneunundneunzigtausend\n",
                    encoding="utf-8")
    config = {**TINY, "vocab_size": 270, "max_len": 6}
    task = TranslateTask(TranslateConfig(data=str(data), eval_data=str(data), too_long="error", **config))
    with pytest.raises(DataError, match=r"d.tsv:11: (source|target) has \d+ tokens > max_len 6"):
        task.train_dataset()
    task = TranslateTask(TranslateConfig(data=str(data), eval_data=str(data), **config))  # too_long=skip: the default
    with caplog.at_level(logging.WARNING, logger="tokformer"):
        assert len(task.train_dataset()) == 10
    assert "skipped 1 of 11 training pairs longer than max_len 6" in caplog.text and "d.tsv:11" in caplog.text
    translator = Predictor(task, task.build_model())
    with pytest.raises(DataError, match="sentence 2 has .* more than the model's max_len 6"):
        translator(["one", "nine hundred ninety-nine thousand"])


def test_shared_or_separate_vocabularies(tmp_path: Path) -> None:
    data = write_numbers(tmp_path / "n.tsv", NUMBERS)
    separate = TranslateTask(TranslateConfig(data=str(data), shared_vocab=False, share_embeddings=False, **TINY))
    model = separate.build_model()
    assert separate.src_tok is not separate.tgt_tok
    assert model.src_embedder is not model.tgt_embedder
    shared = TranslateTask(TranslateConfig(data=str(data), **TINY))
    model = shared.build_model()
    assert model.src_embedder is model.tgt_embedder and model.head.weight is model.tgt_embedder.tokens.weight
    with pytest.raises(ValueError, match="share_embeddings needs shared_vocab"):
        TranslateConfig(shared_vocab=False)


@pytest.mark.slow
def test_default_data_is_learned_to_high_held_out_exact_match(tmp_path: Path) -> None:
    """`tokformer train translate` with no data: the generated numbers, task defaults (minutes)."""
    from tokformer.engine import train
    from tokformer.tasks.translate import held_out_scores

    result = train("translate", run_dir=str(tmp_path / "run"), quiet=True)
    assert result.metrics["exact_match"] > 0.9
    scores = held_out_scores(result.run_dir)
    assert scores["exact_match"] == result.report.metrics["exact_match"]  # the best checkpoint, decoded alike
    assert scores["exact_match"] > 0.9 and scores["chrf"] > 97 and scores["sentences"] == 1000


def test_llama_style_blocks_decode_the_same_cached_and_uncached(tmp_path: Path) -> None:
    """Block options reach both stacks; GQA caches and q/k norm keep cached decoding exact."""
    torch.manual_seed(0)
    data = write_numbers(tmp_path / "numbers.tsv", NUMBERS)
    options = {"norm": "rms", "mlp": "swiglu", "n_kv_heads": 2, "qk_norm": True, "bias": False}
    task = TranslateTask(TranslateConfig(data=str(data), eval_data=str(data), **TINY, **options))
    task.train_dataset()
    model = task.build_model().eval()
    block = model.decoder.blocks[0]
    assert block.attn.n_kv_heads == 2 and block.cross_attn.n_kv_heads == 2 and block.attn.qkv.bias is None
    assert isinstance(model.encoder.blocks[0].norm1, torch.nn.RMSNorm)
    translator = Predictor(task, model)
    src = src_batch(translator, sources([324, 56789, 5]))
    bos = task.tgt_tok.token_to_id(BOS)
    cached = greedy_decode(model, src, bos, -1, DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=8))
    with torch.no_grad():
        memory = model.encode(src)
        prefix = torch.full((3, 1), bos)
        for _ in range(8):
            tgt = TokenBatch(mask=torch.ones_like(prefix, dtype=torch.bool), ids=prefix,
                             positions=torch.arange(prefix.shape[1]).expand_as(prefix))
            prefix = torch.cat([prefix, model.decode(tgt, memory, src.mask)[:, -1].argmax(-1)[:, None]], dim=1)
    assert cached == prefix[:, 1:].tolist()
