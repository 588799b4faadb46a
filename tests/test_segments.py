"""Image and text tokens in one sequence (tokformer.segments): the concatenation, its padding invariance and
the prefix-LM mask's causality over it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokformer.config import TransformerConfig
from tokformer.masks import prefix_lm_mask
from tokformer.segments import SegmentEmbedder
from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer
from tokformer.transformer import Encoder

D = 16


def parts(seed: int = 0):
    torch.manual_seed(seed)
    image_tok = ImagePatchTokenizer(patch_size=8, image_size=16, class_token=False)
    text_tok = BPETokenizer.train(["how many birds? three birds. two birds. is it a bird? yes"] * 3, 300)
    embed = SegmentEmbedder(
        {
            "image": image_tok.build_embedder(D),
            "prompt": text_tok.build_embedder(D),
            "answer": text_tok.build_embedder(D),
        },
        D,
    )
    for p in embed.parameters():  # nothing left at 0/1: a mix-up of segments must show
        nn.init.normal_(p, std=0.5)
    encoder = Encoder(TransformerConfig(d_model=D, n_heads=2, n_layers=2, dropout=0.0)).eval()
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    return image_tok, text_tok, embed, encoder, images


def segments(image_tok, text_tok, images, prompts, answers, prompt_width=None):
    prompt = text_tok.batch(prompts, max_length=prompt_width, pad_to_max_length=prompt_width is not None)
    return {"image": image_tok.batch(list(images)), "prompt": prompt, "answer": text_tok.batch(answers)}


def run(embed, encoder, batches):
    mixed = embed(batches)
    n = mixed.x.shape[1]
    out = encoder(mixed.x, mixed.mask, attn_mask=prefix_lm_mask(mixed.end_of("prompt"), n))
    return mixed, out


def test_segments_are_embedded_by_their_own_embedders_typed_and_concatenated_in_order() -> None:
    image_tok, text_tok, embed, _, images = parts()
    batches = segments(image_tok, text_tok, images, ["how many birds?", "is it"], ["three", "yes"])
    mixed = embed(batches)
    expected, start = [], 0
    for kind, name in enumerate(["image", "prompt", "answer"]):
        expected.append(embed.embedders[name](batches[name]) + embed.types.weight[kind])
        assert mixed.spans[name] == slice(start, start + batches[name].seq_len)
        start += batches[name].seq_len
    torch.testing.assert_close(mixed.x, torch.cat(expected, dim=1), rtol=0, atol=0)
    assert torch.equal(mixed.mask, torch.cat([batches[n].mask for n in ["image", "prompt", "answer"]], dim=1))
    # the two text segments share a tokenizer but not a type: the same ids embed differently
    same = segments(image_tok, text_tok, images, ["three", "yes"], ["three", "yes"])
    again = embed(same)
    assert not torch.allclose(again.x[:, again.spans["prompt"]], again.x[:, again.spans["answer"]])


def test_a_samples_outputs_do_not_depend_on_how_much_the_batch_pads_its_prompt() -> None:
    image_tok, text_tok, embed, encoder, images = parts()
    prompts, answers = ["how many birds?", "is it a bird?"], ["three birds", "yes"]
    with torch.no_grad():
        tight, out_tight = run(embed, encoder, segments(image_tok, text_tok, images, prompts, answers))
        loose, out_loose = run(embed, encoder, segments(image_tok, text_tok, images, prompts, answers, prompt_width=9))
    assert loose.x.shape[1] > tight.x.shape[1]
    for i in range(2):  # each sample's real tokens, in order
        torch.testing.assert_close(out_loose[i, loose.mask[i]], out_tight[i, tight.mask[i]], rtol=1e-5, atol=1e-5)


def test_the_prefix_is_bidirectional_and_the_answer_causal() -> None:
    image_tok, text_tok, embed, encoder, images = parts()
    prompts, answers = ["how many birds?", "is it a bird?"], ["three birds two", "yes it is"]
    with torch.no_grad():
        mixed, out = run(embed, encoder, segments(image_tok, text_tok, images, prompts, answers))
        answer = mixed.spans["answer"]
        changed = segments(image_tok, text_tok, images, prompts, answers)
        last = int(changed["answer"].lengths[0]) - 1
        token = changed["answer"].ids[0, last]
        changed["answer"].ids[0, last] = (token + 1) % text_tok.vocab_size  # the answer's last token
        _, out_changed = run(embed, encoder, changed)
        before_last = answer.start + last
        torch.testing.assert_close(out_changed[0, :before_last], out[0, :before_last], rtol=0, atol=1e-6)
        assert not torch.allclose(out_changed[0, before_last], out[0, before_last])
        prompt_changed = segments(image_tok, text_tok, images, ["how many cats?", prompts[1]], answers)
        _, out_prompt = run(embed, encoder, prompt_changed)
    image = mixed.spans["image"]
    assert not torch.allclose(out_prompt[0, image], out[0, image]), "image tokens must see the prompt after them"


def test_segments_must_match_the_embedders_and_one_another() -> None:
    image_tok, text_tok, embed, _, images = parts()
    batches = segments(image_tok, text_tok, images, ["how many birds?", "is it"], ["three", "yes"])
    with pytest.raises(ValueError, match=r"expected the segments \['image', 'prompt', 'answer'\]"):
        embed({k: v for k, v in batches.items() if k != "answer"})
    with pytest.raises(ValueError, match="disagree on the batch size"):
        embed(batches | {"answer": text_tok.batch(["three"])})

    class OneToken(nn.Module):  # breaks the contract: one output per input token
        def forward(self, batch):
            return torch.zeros(batch.batch_size, 1, D)

    wrong = SegmentEmbedder({"image": OneToken()}, D)
    with pytest.raises(ValueError, match="segment 'image': its embedder gave"):
        wrong({"image": text_tok.batch(["three birds"])})
