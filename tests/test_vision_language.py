"""The image + prompt -> answer model: cached decoding computes what training computes, the answer is
causal and the prefix is read whole, padding changes nothing, greedy decoding is the argmax chain,
and the model can fit a few question-answer pairs about pictures."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokformer.config import TransformerConfig
from tokformer.sampling import SamplingConfig
from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer
from tokformer.vision_language import VisionLanguageModel, generate_answers

D = 16
SPECIALS = ["<bos>", "<eos>", "<pad>"]


@pytest.fixture(scope="module")
def tokenizers():
    image_tok = ImagePatchTokenizer(patch_size=8, image_size=16, class_token=False)
    text_tok = BPETokenizer.train(["how many birds? three birds. two birds. is it a bird? yes no"] * 3, 300,
                                  special_tokens=SPECIALS)
    return image_tok, text_tok


def build(tokenizers, seed: int = 0, randomise: bool = True) -> VisionLanguageModel:
    image_tok, text_tok = tokenizers
    torch.manual_seed(seed)
    cfg = TransformerConfig(d_model=D, n_heads=2, n_layers=2, dropout=0.0)
    model = VisionLanguageModel(image_tok.build_embedder(D), text_tok.build_embedder(D), cfg)
    if randomise:  # nothing left at 0/1: a mix-up must show
        for p in model.parameters():
            nn.init.normal_(p, std=0.3)
    return model.eval()


def answer_batch(text_tok, answers: list[str]):
    bos, eos = (text_tok.special_tokens[t] for t in ("<bos>", "<eos>"))
    return [[bos, *text_tok.encode(a)] for a in answers], eos


def inputs(tokenizers, prompts: list[str], answers: list[str], seed: int = 0, prompt_width: int | None = None):
    image_tok, text_tok = tokenizers
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (len(prompts), 3, 16, 16), dtype=torch.uint8, generator=g)
    prompt = text_tok.batch(prompts, max_length=prompt_width, pad_to_max_length=prompt_width is not None)
    ids, _ = answer_batch(text_tok, answers)
    width = max(len(a) for a in ids)
    answer = text_tok.batch([""] * len(ids))
    answer.ids = torch.tensor([a + [0] * (width - len(a)) for a in ids])
    answer.mask = torch.tensor([[True] * len(a) + [False] * (width - len(a)) for a in ids])
    answer.positions = torch.arange(width).expand(len(ids), -1)
    return image_tok.batch(list(images)), prompt, answer


def test_cached_decoding_computes_the_training_forward(tokenizers) -> None:
    model = build(tokenizers)
    image, prompt, answer = inputs(tokenizers, ["how many birds?", "is it"], ["three birds", "yes"])
    with torch.no_grad():
        full = model(image, prompt, answer)  # [B, Na, V]
        caches = model.make_caches()
        key_mask = model.read_prefix(image, prompt, caches)
        for t in range(answer.seq_len):
            key_mask = torch.cat([key_mask, torch.ones_like(key_mask[:, :1])], dim=1)
            stepped = model.step(answer.ids[:, t], t, key_mask, caches)
            real = answer.mask[:, t]
            torch.testing.assert_close(stepped[real], full[real, t], rtol=1e-5, atol=1e-5)


def test_the_answer_is_causal_and_the_prefix_is_read_whole(tokenizers) -> None:
    model = build(tokenizers)
    image, prompt, answer = inputs(tokenizers, ["how many birds?"], ["three birds"])
    with torch.no_grad():
        base = model(image, prompt, answer)
        later = answer.ids.clone()
        later[0, 2:] = (later[0, 2:] + 1) % 290
        changed = model(image, prompt, type(answer)(ids=later, mask=answer.mask, positions=answer.positions))
        torch.testing.assert_close(changed[:, :2], base[:, :2], rtol=0, atol=0)  # earlier tokens never see later
        assert not torch.allclose(changed[:, 2:], base[:, 2:])
        other_prompt = inputs(tokenizers, ["is it a bird?"], ["three birds"])[1]
        other_image = inputs(tokenizers, ["how many birds?"], ["three birds"], seed=1)[0]
        assert not torch.allclose(model(image, other_prompt, answer)[:, 0], base[:, 0])  # the question matters
        assert not torch.allclose(model(other_image, prompt, answer)[:, 0], base[:, 0])  # and the image


def test_padding_changes_no_row(tokenizers) -> None:
    model = build(tokenizers)
    image, prompt, answer = inputs(tokenizers, ["how many birds?", "is it a bird? yes no yes"],
                                   ["three birds", "no"], prompt_width=24)
    alone = inputs(tokenizers, ["how many birds?"], ["three birds"])
    with torch.no_grad():
        batched = model(image, prompt, answer)[0]
        single = model(image.select(slice(0, 1)), alone[1], alone[2])[0]
    torch.testing.assert_close(batched[: single.shape[0]], single, rtol=1e-5, atol=1e-5)


def test_greedy_decoding_is_the_argmax_chain_and_stops_at_eos(tokenizers) -> None:
    model = build(tokenizers, seed=2)
    image_tok, text_tok = tokenizers
    bos, eos = (text_tok.special_tokens[t] for t in ("<bos>", "<eos>"))
    image, prompt, _ = inputs(tokenizers, ["how many birds?", "is it"], ["x", "y"])
    got = generate_answers(model, image, prompt, bos_id=bos, eos_id=eos, max_new_tokens=6)
    for row in range(2):
        chain = [bos]
        with torch.no_grad():
            for _ in range(6):
                one = inputs(tokenizers, ["how many birds?", "is it"][row:row + 1], ["x"])
                answer = type(one[2])(ids=torch.tensor([chain]), mask=torch.ones(1, len(chain), dtype=torch.bool),
                                      positions=torch.arange(len(chain))[None])
                image_row = image.select(slice(row, row + 1))
                token = int(model(image_row, one[1], answer)[0, -1].argmax())
                if token == eos:
                    break
                chain.append(token)
        assert got[row] == chain[1:]
    # a row ends at its EOS, which it does not return; the others go on as before
    assert got[0], "row 0 generated nothing to use as an end token"
    stop = got[0][0]
    ended = generate_answers(model, image, prompt, bos_id=bos, eos_id=stop, max_new_tokens=6,
                             sampling=SamplingConfig(temperature=0.0))
    cut = got[1].index(stop) if stop in got[1] else len(got[1])
    assert ended == [[], got[1][:cut]]


def test_a_few_questions_about_pictures_are_fitted(tokenizers) -> None:
    """Eight (picture, question) pairs, answers that depend on both: fitted to every token."""
    image_tok, text_tok = tokenizers
    model = build(tokenizers, randomise=False).train()
    prompts = ["how many birds?", "is it a bird?"] * 4
    answers = ["three", "yes", "two", "no", "two", "yes", "three", "no"]
    image, prompt, answer = inputs(tokenizers, prompts, answers, seed=3)
    _, eos = answer_batch(text_tok, answers)
    targets = torch.cat([answer.ids[:, 1:], torch.zeros_like(answer.ids[:, :1])], dim=1)
    ends = answer.mask.sum(1) - 1  # EOS after the last answer token
    targets[torch.arange(len(answers)), ends] = eos
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        logits = model(image, prompt, answer)
        loss = nn.functional.cross_entropy(logits[answer.mask], targets[answer.mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    bos = text_tok.special_tokens["<bos>"]
    got = generate_answers(model, image, prompt, bos_id=bos, eos_id=eos, max_new_tokens=4)
    assert [text_tok.decode(a) for a in got] == answers
