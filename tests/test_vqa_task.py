"""The vqa task: batches, the exact-match metric (which is greedy decoding), the question-only
baseline, training on built-in and user data through the engine, and inference from the
library, the CLI and a reloaded run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from tokformer.cli import main
from tokformer.engine import evaluate, train
from tokformer.errors import ConfigError
from tokformer.store.checkpoints import find_checkpoint, load_model_state
from tokformer.store.loader import load
from tokformer.tasks import vqa
from tokformer.tasks.vqa import BOS, EOS, IGNORE, PAD, Example, Examples, VQAConfig, VQATask
from tokformer.tasks.vqa_data import QUESTION_TYPES, bird_questions

TINY = dict(image_size=32, patch_size=8, train_size=64, eval_size=32, d_model=32, n_heads=2, n_layers=2,
            vocab_size=300, tokenizer="linear")


def tiny_task(**options) -> VQATask:
    return VQATask(VQAConfig(**{**TINY, **options}))


def test_batches_shift_the_answer_and_pad_with_nothing_to_learn() -> None:
    task = tiny_task()
    images = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    batch = task.collate([Example(images[0], "how many birds are there?", "three"),
                          Example(images[1], "", "two birds left")], train=True)
    text = task.text_tokenizer()
    bos, eos, pad = (text.special_tokens[t] for t in (BOS, EOS, PAD))
    for row, answer in enumerate(["three", "two birds left"]):
        ids = text.encode(answer)
        n = len(ids) + 1
        assert batch["answer"].ids[row, :n].tolist() == [bos, *ids]
        assert batch["targets"][row, :n].tolist() == [*ids, eos]
        assert (batch["targets"][row, n:] == IGNORE).all() and (batch["answer"].ids[row, n:] == pad).all()
        assert batch["answer"].mask[row].tolist() == [True] * n + [False] * (batch["answer"].seq_len - n)
    prompt = batch["prompt"]
    assert prompt.mask[1].sum() == 0 and (prompt.ids[1] == pad).all()  # no question: the model describes
    assert text.decode(prompt.ids[0][prompt.mask[0]].tolist()) == "how many birds are there?"


def fitted(task: VQATask, examples: list[Example], steps: int = 200) -> torch.nn.Module:
    torch.manual_seed(0)
    model = task.build_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = task.collate(examples, train=True)
    for _ in range(steps):
        out = task.step(model, batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    return model.eval()


def test_exact_match_is_what_greedy_decoding_answers() -> None:
    """The metric is computed under teacher forcing; a row counts exactly when greedy decoding
    gives its answer: checked on a model that fits some examples and misses others."""
    task = tiny_task()
    data = bird_questions(24, seed=0, split="train", size=32)
    images = torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2)
    examples = [Example(images[i], data.questions[i], data.answers[i]) for i in range(24)]
    model = fitted(task, examples[:12])
    with torch.no_grad():
        exact = task.step(model, task.collate(examples, train=False)).outputs
    answered = [task.predict(model, [e.image], prompt=e.question)[0] for e in examples]
    assert exact.tolist() == [a == e.answer for a, e in zip(answered, examples, strict=True)]
    assert 0 < int(exact.sum()) < len(examples)  # both kinds of row are there


class FavouredHead(torch.nn.Module):
    """A head that adds ``boost`` to the logits of ``ids``."""

    def __init__(self, head: torch.nn.Module, ids: list[int], boost: float = 100.0) -> None:
        super().__init__()
        self.head, self.ids, self.boost = head, ids, boost

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden).clone()
        logits[..., self.ids] += self.boost
        return logits


def test_tokens_no_answer_holds_are_never_chosen() -> None:
    """BOS and padding are never an answer's token: a model that favours them above everything answers
    and scores exactly as one that does not (an undertrained model printed a raw ``<|bos|>``)."""
    task = tiny_task()
    data = bird_questions(8, seed=0, split="train", size=32)
    images = torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2)
    examples = [Example(images[i], data.questions[i], data.answers[i]) for i in range(8)]
    model = fitted(task, examples[:4], steps=60)
    batch = task.collate(examples, train=False)
    with torch.no_grad():
        plain = task.step(model, batch)
        answers = [task.predict(model, [e.image], prompt=e.question)[0] for e in examples]
        text = task.text_tokenizer()
        model.head = FavouredHead(model.head, [text.special_tokens[BOS], text.special_tokens[PAD]])
        favoured = task.step(model, batch)
        assert [task.predict(model, [e.image], prompt=e.question)[0] for e in examples] == answers
    assert favoured.outputs.tolist() == plain.outputs.tolist()
    assert favoured.metrics["token_accuracy"][0] == plain.metrics["token_accuracy"][0]
    assert not any(BOS in a or PAD in a for a in answers)


def test_a_prompt_is_read_stripped_as_training_questions_are(monkeypatch) -> None:
    """Training strips each question; ``--prompt " how many birds? "`` must reach the model the same."""
    task = tiny_task()
    model = task.build_model().eval()
    read = []
    questions = task._questions
    monkeypatch.setattr(task, "_questions", lambda texts: read.append(list(texts)) or questions(texts))
    task.predict(model, [torch.zeros(3, 32, 32, dtype=torch.uint8)], prompt="  how many birds? \n")
    assert read == [["how many birds?"]]


def test_the_question_only_baseline_answers_from_the_training_answers() -> None:
    task = tiny_task()
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    train_set = [Example(image, "q1", "a", "count"), Example(image, "q1", "a", "count"),
                 Example(image, "q1", "b", "count"), Example(image, "q2", "c", "same"),
                 Example(image, "q3", "c", "same"), Example(image, "q4", "d", "facing")]
    evals = [Example(image, "q1", "a", "count"),  # its question's most frequent answer, a: right
             Example(image, "q2", "d", "same"),  # q2's answer, c: wrong
             Example(image, "q9", "c", "same"),  # an unseen question: its type's answer, c: right
             Example(image, "q9", "a", "presence")]  # an unseen type: the overall answer, a (first of a, c): right
    load = task.image_tokenizer.read_at_size
    task._splits = {"train": Examples(train_set, load), "eval": Examples(evals, load)}
    result = task.baselines(Examples(evals, load))
    assert result["question only (most frequent answer to it)"]["exact"] == 3 / 4
    assert result["most frequent answer"]["exact"] == 2 / 4  # a, for everything


def test_the_planned_model_is_the_built_one_with_the_largest_text_table() -> None:
    """What the engine sizes before any data: every tensor the trained model has, of its shape, but the
    text table at the configured vocabulary (the most BPE learns; here it learns fewer)."""
    task = tiny_task(vocab_size=2000)  # more than 64 examples' texts hold
    built = {n: p.shape for n, p in task.build_model().named_parameters()}
    planned = {n: p.shape for n, p in task.planned_model().named_parameters()}
    table = "segments.embedders.prompt.tokens.weight"
    assert set(planned) == set(built) and table in built
    assert built[table][0] < planned[table][0] == 2000
    assert {n: s for n, s in planned.items() if n != table} == {n: s for n, s in built.items() if n != table}


def test_learned_picture_positions_are_one_entry_per_patch_as_long_as_a_token_and_reload(tmp_path) -> None:
    """``position="learned"``: one table row per patch drawn at unit variance (the birds experiment's
    measured scale, not timm's 0.02, which a short run cannot grow), saved and read back with the run;
    the default adds the fixed 2-D sin/cos code and has no table."""
    assert tiny_task().build_model().segments.embedders["image"].pos_embed is None
    table = tiny_task(position="learned").build_model().segments.embedders["image"].pos_embed
    assert table.shape == (1, (32 // 8) ** 2, 32)  # [1, N, d]
    assert abs(float(table.std()) - 1.0) < 0.15 and abs(float(table.mean())) < 0.15
    train("vqa", run_dir=str(tmp_path / "run"), steps=2, warmup_steps=1, quiet=True,
          **{**TINY, "position": "learned"})
    trained = load_model_state(find_checkpoint(tmp_path / "run", "latest"))
    reloaded = load(tmp_path / "run", checkpoint="latest").model.segments.embedders["image"].pos_embed
    assert torch.equal(reloaded, trained["segments.embedders.image.pos_embed"])


def test_a_model_too_large_for_memory_is_refused_before_any_data_are_drawn(tmp_path, monkeypatch) -> None:
    """Drawing the built-in data and learning the BPE took about half a minute before the size check."""
    drawn = []
    monkeypatch.setattr(vqa, "builtin_examples", lambda *args: drawn.append(args))
    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", str(2**20))
    with pytest.raises(ConfigError, match=r"task vqa's config asks for a model of [\d,]+ parameters"):
        train("vqa", run_dir=str(tmp_path / "run"), steps=2, quiet=True, **{**TINY, "d_model": 256})
    assert drawn == [] and not (tmp_path / "run").exists()


def test_the_question_only_baseline_is_saved_and_read_back_whole(tmp_path) -> None:
    """Saved with the model: read back it answers as fitted; a damaged file is one DataError naming it."""
    from tokformer.errors import DataError
    from tokformer.tasks.vqa import QuestionOnly

    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    fitted_blind = QuestionOnly.fit([Example(image, "q1", "é", "count"), Example(image, "q1", "b", "count"),
                                     Example(image, "q1", "é", "count"), Example(image, "q2", "c", "same")])
    fitted_blind.save(tmp_path / "blind.json")
    assert QuestionOnly.load(tmp_path / "blind.json") == fitted_blind
    assert fitted_blind.guess(Example(image, "q1", "", "same")) == "é"
    for damaged in ('[]', '{"by_question": {}, "by_kind": {}}', '{"by_question": {"q": 1}, "by_kind": {}, '
                    '"overall": "a"}', "not json"):
        (tmp_path / "blind.json").write_text(damaged, encoding="utf-8")
        with pytest.raises(DataError, match=f"^{tmp_path / 'blind.json'}"):
            QuestionOnly.load(tmp_path / "blind.json")


def test_builtin_examples_are_drawn_chunk_by_chunk_from_the_generators_streams(monkeypatch) -> None:
    """The training set is drawn a chunk at a time (the whole set at once peaked at 4.4 GB), chunk
    ``k`` being the generator's stream ``k``: the same examples as asking for each chunk alone."""
    monkeypatch.setattr(vqa, "SCENES_PER_CHUNK", 5)
    examples = vqa.builtin_examples(12, seed=3, split="train", size=32)
    parts = [bird_questions(m, seed=3, split="train", size=32, chunk=k) for k, m in enumerate((5, 5, 2))]
    assert len(examples) == 12
    assert [e.question for e in examples] == [q for part in parts for q in part.questions]
    assert [e.answer for e in examples] == [a for part in parts for a in part.answers]
    pictures = np.concatenate([part.scenes.images for part in parts])  # [12, H, W, 3]
    for example, picture in zip(examples, pictures, strict=True):
        assert torch.equal(example.image.permute(1, 2, 0), torch.from_numpy(picture))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("vqa") / "run"
    result = train("vqa", run_dir=str(out), steps=30, warmup_steps=5, batch_size=16, eval_every=30, quiet=True, **TINY)
    assert result.step == 30
    return out, result


def test_training_reports_exact_match_per_type_and_held_out_and_the_baselines(run_dir) -> None:
    """The breakdown is of the same pass: the overall exact match is the per-type ones weighted by
    how many questions of each type the evaluation split holds."""
    _, result = run_dir
    metrics = result.metrics
    names = {f"exact_{kind}" for kind in QUESTION_TYPES} | {"exact_held_phrasing", "exact_held_combo", "exact_seen"}
    names |= {f"exact_seen_{kind}" for kind in QUESTION_TYPES}
    assert names <= set(metrics)
    kinds = bird_questions(TINY["eval_size"], seed=VQAConfig.data_seed, split="test", size=32).kinds
    weighted = sum(kinds.count(k) * metrics[f"exact_{k}"] for k in QUESTION_TYPES) / len(kinds)
    assert metrics["exact"] == pytest.approx(weighted)
    assert set(result.report.baselines) == {"question only (most frequent answer to it)", "most frequent answer"}


def test_each_types_score_on_seen_questions_leaves_out_the_held_out_phrasings_and_combinations() -> None:
    """``exact_seen_<type>`` counts a question only if its phrasing and its (type, quadrant) combination
    were both trained on; ``exact_<type>`` counts every question of the type."""
    kinds = ["count", "count", "count", "presence", "presence", "species"]
    held_phrasing = torch.tensor([False, True, False, False, False, True])
    held_combo = torch.tensor([False, False, False, True, False, False])
    exact = torch.tensor([True, False, False, False, True, False])
    groups = vqa._breakdown(exact, {"kinds": kinds, "held_phrasing": held_phrasing, "held_combo": held_combo})
    ratio = lambda name: int(groups[name][0]) / groups[name][1]
    assert ratio("exact_count") == pytest.approx(1 / 3) and ratio("exact_seen_count") == 0.5
    assert ratio("exact_presence") == 0.5 and ratio("exact_seen_presence") == 1.0
    assert groups["exact_seen_species"][1] == 0 and groups["exact_seen_same"][1] == 0
    assert ratio("exact_seen") == pytest.approx(2 / 3)  # rows 0, 2 and 4


def test_evaluating_a_builtin_run_draws_only_its_evaluation_scenes(run_dir, monkeypatch) -> None:
    """The question-only baseline is read with the run, so evaluating draws no training scene (it drew
    all 20,000 of a default run, 21 s on 2 cores, to refit it) and reports what training did."""
    out, result = run_dir
    drawn = []
    draw = vqa.builtin_examples
    monkeypatch.setattr(vqa, "builtin_examples", lambda n, seed, split, size: drawn.append(split) or
                        draw(n, seed, split, size))
    evaluation = evaluate(str(out), checkpoint="latest", quiet=True)
    assert drawn == ["test"]
    assert evaluation.baselines == result.report.baselines


def test_a_reloaded_run_answers_like_the_task_and_the_cli(run_dir, tmp_path) -> None:
    out, _ = run_dir
    data = bird_questions(3, seed=9, split="sample", size=32)
    paths = []
    for i, picture in enumerate(data.scenes.images):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(picture).save(paths[-1])
    predictor = load(out)
    question, images = "how many birds are there?", [str(p) for p in paths]
    answers = predictor(images, prompt=question)
    assert answers == predictor.task.predict(predictor.model, images, prompt=question)
    result = CliRunner().invoke(main, ["predict", str(out), *images, "--prompt", question])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == answers


def test_prompt_is_refused_by_a_model_without_questions(tmp_path) -> None:
    train("sort", run_dir=str(tmp_path / "sort"), steps=2, warmup_steps=1, quiet=True, train_size=64, eval_size=16)
    result = CliRunner().invoke(main, ["predict", str(tmp_path / "sort"), "312", "--prompt", "why?"])
    assert result.exit_code == 2 and "--prompt does not apply to this model" in result.output
    assert "Traceback" not in result.output


def test_the_image_only_baseline_never_sees_the_question() -> None:
    """``use_question=False``: the prompt is all padding whatever was asked, so two questions about
    one picture get the same logits; asking such a model something is refused, not ignored."""
    task = tiny_task(use_question=False)
    model = task.build_model().eval()
    image = torch.from_numpy(bird_questions(1, seed=4, split="sample", size=32).scenes.images[0]).permute(2, 0, 1)
    batches = [task.collate([Example(image, q, "two")], train=False)
               for q in ("how many birds are there?", "is there a bird at the top left?")]
    assert not batches[0]["prompt"].mask.any()
    with torch.no_grad():
        first, second = (model(b["image"], b["prompt"], b["answer"]) for b in batches)
    assert torch.equal(first, second)
    asking = tiny_task()
    asked = asking.collate([Example(image, "how many birds are there?", "two")], train=False)
    assert asked["prompt"].mask.any()  # with the default, the question is there
    assert len(task.predict(model, [image])) == 1
    with pytest.raises(ConfigError, match="trained without questions"):
        task.predict(model, [image], prompt="how many birds are there?")


def colour_folder(folder: Path) -> list[str]:
    """24 red or blue pictures with a question about their colour (a third with none); its lines."""
    rng = np.random.default_rng(0)
    (folder / "img").mkdir(parents=True)
    lines = []
    for i in range(24):
        colour = ["red", "blue"][i % 2]
        picture = np.zeros((32, 32, 3), dtype=np.uint8)
        picture[..., 0 if colour == "red" else 2] = 200 + rng.integers(0, 50)
        Image.fromarray(picture).save(folder / "img" / f"{i}.png")
        question = "what colour is it?" if i % 3 else ""
        lines.append(json.dumps({"image": f"img/{i}.png", "question": question, "answer": colour}))
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


@pytest.mark.parametrize(("data", "stops_at"), [("folder", 8), ("birds", 20)])
def test_early_stopping_is_on_for_the_users_data_only(tmp_path, data, stops_at) -> None:
    """A learning rate too small to change any answer: on the user's folder the run stops after 3
    evaluations without a better exact match (steps 4, 6, 8 after the best at 2); the built-in data
    train their whole budget."""
    if data == "folder":
        colour_folder(tmp_path / "data")
        data = str(tmp_path / "data")
    result = train("vqa", run_dir=str(tmp_path / "run"), data=data, steps=20, warmup_steps=1, lr=1e-12,
                   batch_size=8, eval_every=2, quiet=True, **TINY)
    assert result.step == stops_at
    assert result.stopped_early is (stops_at < 20)


def test_a_jsonl_folder_trains_and_evaluates(tmp_path) -> None:
    folder = tmp_path / "data"
    lines = colour_folder(folder)
    out = tmp_path / "run"
    result = train("vqa", run_dir=str(out), data=str(folder), steps=40, warmup_steps=5, batch_size=8, eval_every=40,
                   quiet=True, val_fraction=0.25, **TINY)
    assert "exact_count" not in result.metrics  # question types are the built-in data's
    evaluated = CliRunner().invoke(main, ["evaluate", str(out), "--data", str(folder / "data.jsonl"), "--json", "-q"])
    assert evaluated.exit_code == 0, evaluated.output
    predictor = load(out)
    records = [json.loads(line) for line in lines]
    right = [predictor([str(folder / r["image"])], prompt=r["question"])[0] == r["answer"] for r in records]
    report = json.loads(evaluated.output.splitlines()[-1])
    assert report["metrics"]["exact"] == pytest.approx(np.mean(right))
    # a model folder evaluates new data with the training folder gone: the baselines travel with the model
    exported = CliRunner().invoke(main, ["export", str(out), "--out", str(tmp_path / "model"), "-q"])
    assert exported.exit_code == 0, exported.output
    shutil.copytree(folder, tmp_path / "elsewhere")
    shutil.rmtree(folder)
    again = CliRunner().invoke(main, ["evaluate", str(tmp_path / "model"), "--data",
                                      str(tmp_path / "elsewhere" / "data.jsonl"), "--json", "-q"])
    assert again.exit_code == 0, again.output
    moved = json.loads(again.output.splitlines()[-1])
    assert moved["baselines"] == report["baselines"] and moved["metrics"]["exact"] == report["metrics"]["exact"]


@pytest.mark.parametrize("tokenizer", ["linear", "local"])
def test_a_users_large_images_are_read_at_the_models_size_with_the_tokens_of_the_whole_image(tmp_path,
                                                                                            tokenizer) -> None:
    """A dataset item holds the picture at the model's size, not the file's (a batch of 32 photos of
    5700² pixels held 3 GB before the batch resized them), and its tokens are exactly those of the
    whole image given to the tokenizer."""
    rng = np.random.default_rng(0)
    sizes = [(400, 300), (96, 520), (32, 32)]  # (width, height): larger, another shape, the model's own
    for i, size in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    lines = [json.dumps({"image": f"{i}.png", "question": "what?", "answer": "this"}) for i in range(len(sizes))]
    (tmp_path / "eval.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    task = tiny_task(tokenizer=tokenizer)
    dataset = task.eval_data(str(tmp_path / "eval.jsonl"), tmp_path / "work", None)
    items = [dataset[i] for i in range(len(dataset))]
    assert [tuple(item.image.shape) for item in items] == [(3, 32, 32)] * len(sizes)
    pictures = [Image.open(tmp_path / f"{i}.png") for i in range(len(sizes))]
    read, whole = task.collate(items, False)["image"], task.image_tokenizer.batch(pictures)
    assert torch.equal(read.features, whole.features) and torch.equal(read.positions, whole.positions)


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path) -> None:
    """Resumed from its step-4 checkpoint, a run ends where the uninterrupted one did, bit for bit,
    with the tokenizers it started with (not learnt again)."""
    import shutil

    from safetensors.torch import load_file

    from tokformer.store.steps import list_checkpoints, step_dir

    full = train("vqa", run_dir=str(tmp_path / "full"), steps=8, warmup_steps=2, batch_size=8, eval_every=4,
                 quiet=True, **TINY)
    cut = tmp_path / "cut"
    shutil.copytree(full.run_dir, cut)
    shutil.rmtree(step_dir(cut, 8))
    assert max(list_checkpoints(cut)) == 4
    text_files = {p.name: p.read_bytes() for p in (cut / "text_tokenizer").iterdir()}
    resumed = train(resume=cut, quiet=True)
    assert resumed.step == 8
    a, b = (load_file(step_dir(r, 8) / "model.safetensors") for r in (full.run_dir, cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {p.name: p.read_bytes() for p in (cut / "text_tokenizer").iterdir()} == text_files


def test_a_bad_data_folder_is_one_line_from_the_cli(tmp_path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(folder / "a.png")
    (folder / "data.jsonl").write_text('{"image": "a.png", "answer": "x"}\n{"image": "a.png", "answer": 3}\n',
                                       encoding="utf-8")
    result = CliRunner().invoke(main, ["train", "vqa", "--data", str(folder), "--run-dir", str(tmp_path / "run"),
                                       "--steps", "2", "-q"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    expected = f'{folder / "data.jsonl"}:2: "answer" must be a string, got 3'
    assert result.output.strip().splitlines()[-1].endswith(expected)
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory) -> dict[str, Path]:
    """8 deterministic steps of vqa under torchrun (gloo, 2 processes), once per strategy, each
    rank logging its BPE training into ``bpe-RANK.txt`` beside the run."""
    import os
    import subprocess
    import sys
    import textwrap

    import torch.distributed as dist

    if not dist.is_gloo_available():
        pytest.skip("needs the gloo backend")
    runs = {}
    for strategy in ("ddp", "fsdp"):
        folder = tmp_path_factory.mktemp(strategy)
        script = folder / "run_vqa.py"
        script.write_text(textwrap.dedent(f"""
            import os
            from pathlib import Path
            from tokformer.engine import evaluate, train
            from tokformer.tokenizers.bpe import BPETokenizer

            log = Path({str(folder)!r}) / f"bpe-{{os.environ['RANK']}}.txt"
            real = BPETokenizer.train.__func__

            def counting(cls, *args, **kwargs):
                log.open("a").write("bpe\\n")
                return real(cls, *args, **kwargs)

            BPETokenizer.train = classmethod(counting)
            train("vqa", run_dir={str(folder / "run")!r}, steps=8, warmup_steps=1, batch_size=8, eval_every=8,
                  log_every=1, device="cpu", deterministic=True, strategy={strategy!r}, quiet=True, **{TINY!r})
        """))
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               "2", str(script)], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        runs[strategy] = folder
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_train_with_one_tokenizer_learnt_by_rank_0(two_process_runs, strategy) -> None:
    """DDP and FSDP under torchrun: rank 0 learns and saves the text tokenizer, rank 1 loads it; the
    run ends with a checkpoint that loads and answers."""
    folder = two_process_runs[strategy]
    assert (folder / "bpe-0.txt").read_text().split() == ["bpe"]
    assert not (folder / "bpe-1.txt").exists(), "rank 1 learnt its own tokenizer"
    picture = torch.zeros(3, 32, 32, dtype=torch.uint8)
    assert isinstance(load(folder / "run")([picture], prompt="how many birds are there?")[0], str)


@pytest.mark.slow
def test_fsdp_trains_vqa_as_ddp_does(two_process_runs) -> None:
    """The same global batches: FSDP's losses are DDP's, step by step, up to summation order."""
    losses = {}
    for strategy, folder in two_process_runs.items():
        records = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
        losses[strategy] = {r["step"]: r["loss"] for r in records if r["split"] == "train"}
    assert sorted(losses["fsdp"]) == list(range(1, 9))
    for step, loss in losses["ddp"].items():
        assert losses["fsdp"][step] == pytest.approx(loss, abs=1e-5), step
