"""What the mutation run of vqa's scoring found unchecked: the question-only baseline's counts when the
most frequent answer is not the first seen, its file's exact form, the baseline shares on an
evaluation set of one and of three, and a step's token accuracy and weight."""

from __future__ import annotations

import torch

from tokformer.tasks.vqa import IGNORE, Example, Examples, QuestionOnly, VQAConfig, VQATask

IMAGE = torch.zeros(3, 32, 32, dtype=torch.uint8)


def test_the_most_frequent_answer_wins_even_when_seen_last() -> None:
    """Per question and per type: b first, then a twice; a is the answer (equal counts would give b)."""
    blind = QuestionOnly.fit([Example(IMAGE, "q1", "b", "count"), Example(IMAGE, "q1", "a", "count"),
                              Example(IMAGE, "q1", "a", "count"), Example(IMAGE, "q2", "d", "same"),
                              Example(IMAGE, "q3", "c", "same"), Example(IMAGE, "q4", "c", "same")])
    assert blind.by_question == {"q1": "a", "q2": "d", "q3": "c", "q4": "c"}
    assert blind.by_kind == {"count": "a", "same": "c"}
    assert blind.overall in {"a", "c"} and blind.guess(Example(IMAGE, "q9", "", "same")) == "c"


def test_the_saved_baseline_is_plain_utf8_one_entry_a_line(tmp_path) -> None:
    """Readable and diffable: non-ASCII answers as themselves, no indentation."""
    QuestionOnly({"où?": "là"}, {"count": "deux"}, "là").save(tmp_path / "b.json")
    assert (tmp_path / "b.json").read_bytes().decode() == (
        '{\n"by_question": {\n"où?": "là"\n},\n"by_kind": {\n"count": "deux"\n},\n"overall": "là"\n}\n')


def test_baseline_shares_are_fractions_of_the_evaluation_set() -> None:
    task = VQATask(VQAConfig(image_size=32, patch_size=8, tokenizer="linear", vocab_size=300))
    task._question_only = QuestionOnly({"q1": "a"}, {}, "a")
    one = task.baselines(Examples([Example(IMAGE, "q1", "a")], task.image_tokenizer.read_at_size))
    assert one["question only (most frequent answer to it)"]["exact"] == 1.0
    three = task.baselines(Examples([Example(IMAGE, "q1", "a"), Example(IMAGE, "q2", "b"), Example(IMAGE, "q3", "c")],
                                      task.image_tokenizer.read_at_size))
    assert three["most frequent answer"]["exact"] == 1 / 3


def test_token_accuracy_counts_the_answers_tokens_only_and_a_step_weighs_its_examples() -> None:
    """token_accuracy is the share of the answers' tokens (and their ends) predicted right, padding left
    out; a step's count is its number of examples, the weight the engine averages losses over batches by."""
    task = VQATask(VQAConfig(image_size=32, patch_size=8, tokenizer="linear", vocab_size=300, d_model=32,
                             n_heads=2, n_layers=2))
    torch.manual_seed(0)
    model = task.build_model().eval()
    examples = [Example(IMAGE, "how many birds are there?", "three"), Example(IMAGE, "", "two birds left"),
                Example(IMAGE, "is there a bird at the top left?", "no")]  # answers of three lengths: padding
    batch = task.collate(examples, train=False)
    with torch.no_grad():
        out = task.step(model, batch)
        choices = model(batch["image"], batch["prompt"], batch["answer"]).float()
    choices[..., task._never_answered()] = torch.finfo(choices.dtype).min
    real = batch["targets"] != IGNORE
    assert not real.all(), "no padding in the batch: nothing to leave out"
    hits, total = out.metrics["token_accuracy"]
    assert (int(hits), int(total)) == (int((choices.argmax(-1) == batch["targets"])[real].sum()), int(real.sum()))
    assert out.count == len(examples)
