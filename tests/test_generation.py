"""Generation: cached == uncached, batched left-padded == alone, and the sampling filters."""

import pytest
import torch

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.generation import COLUMN_HEAD_MIN_TOKENS, generate, left_pad, positions_from_mask, vocabulary_head
from tokformer.language_model import CausalLM
from tokformer.positional import LearnedPositions
from tokformer.sampling import SamplingConfig, filter_logits, sample_next

VOCAB = 50


def position_sensitive_lm(seed: int, max_len: int, tied: bool = False) -> CausalLM:
    """Token AND position vectors at std 0.3 (the 0.02 init leaves positions almost irrelevant, so a decode that
    got positions wrong still emitted the same tokens) and by default an untied head (a random tied head mostly
    repeats the last token whatever came before): greedy paths are diverse and depend on every position."""
    torch.manual_seed(seed)
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    embedder = Embedder(32, vocab_size=VOCAB, position=LearnedPositions(32, max_len))
    model = CausalLM(embedder, cfg, VOCAB, tie_embeddings=tied).eval()
    with torch.no_grad():
        model.embedder.tokens.weight.normal_(std=0.3)
        model.embedder.position.table.weight.normal_(std=0.3)
    return model


def tiny_lm(seed: int = 0, tied: bool = False) -> CausalLM:
    return position_sensitive_lm(seed, 128, tied)


GREEDY = SamplingConfig(temperature=0)


def test_greedy_generation_is_identical_with_and_without_cache():
    model = tiny_lm()
    ids, mask = left_pad([[1, 2, 3, 4, 5]])
    cached = generate(model, ids, mask, max_new_tokens=40, sampling=GREEDY, use_cache=True)
    uncached = generate(model, ids, mask, max_new_tokens=40, sampling=GREEDY, use_cache=False)
    assert cached == uncached
    assert len(cached[0]) == 40


def full_forward_greedy(model: CausalLM, prompt: list[int], steps: int, positions=torch.arange) -> list[int]:
    """The textbook loop: the whole sequence through ``forward`` (every position's logits) each step.

    ``positions(n)`` gives the positions of an ``n``-token sequence (``arange``: the right ones).
    """
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            x = torch.tensor([ids])
            batch = TokenBatch(ids=x, mask=torch.ones_like(x, dtype=torch.bool), positions=positions(len(ids))[None])
            ids.append(int(model(batch)[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_gives_each_new_token_its_position(seed, use_cache):
    """Positions decide this model's output (see the next test): cached and uncached decodes both equal the full
    forward loop, so each new token is read at its true position (a cache that stops advancing them fails)."""
    model, prompt = tiny_lm(seed), [1, 2, 3, 4, 5]
    got = generate(model, *left_pad([prompt]), max_new_tokens=20, sampling=GREEDY, use_cache=use_cache)[0]
    assert got == full_forward_greedy(model, prompt, 20), (
        f"use_cache={use_cache}: generation differs from the full forward with positions 0..n-1")


@pytest.mark.parametrize("wrong", [
    lambda n: torch.arange(n).clamp(max=4),  # every new token at the last prompt position (positions not advanced)
    lambda n: torch.arange(n) + 1,  # everything one position late
])
def test_wrong_positions_change_the_greedy_output(wrong):
    """Guard on the fixture: were positions near-irrelevant (the 0.02 init), a decode feeding wrong positions
    would still emit the same tokens and the cache tests above would see nothing."""
    model, prompt = tiny_lm(), [1, 2, 3, 4, 5]
    assert full_forward_greedy(model, prompt, 20, wrong) != full_forward_greedy(model, prompt, 20)


@pytest.mark.parametrize("steps", [COLUMN_HEAD_MIN_TOKENS - 1, COLUMN_HEAD_MIN_TOKENS + 8])
def test_generation_through_the_decoding_head_equals_the_full_forward_loop(steps):
    """Short decodes use the head as it is, long ones its column-major copy: same tokens either way."""
    model = tiny_lm(3)
    prompt = [7, 1, 30, 2]
    assert generate(model, *left_pad([prompt]), max_new_tokens=steps, sampling=GREEDY)[0] == full_forward_greedy(
        model, prompt, steps)


@pytest.mark.parametrize("bias", [False, True])
def test_decoding_head_computes_the_head(bias):
    model = tiny_lm()
    if bias:
        model.head = torch.nn.Linear(32, VOCAB)
    x = torch.randn(3, 32)
    head = vocabulary_head(model, max_new_tokens=COLUMN_HEAD_MIN_TOKENS)
    assert head is not model.head  # the long-decode layout was taken
    torch.testing.assert_close(head(x), model.head(x))


def test_batched_left_padded_generation_equals_each_prompt_alone():
    model = tiny_lm()
    prompts = [[7], [3, 9, 4, 1, 2, 8], [11, 12, 13]]
    ids, mask = left_pad(prompts)
    batched = generate(model, ids, mask, max_new_tokens=12, sampling=GREEDY)
    for prompt, got in zip(prompts, batched, strict=True):
        alone = generate(model, *left_pad([prompt]), max_new_tokens=12, sampling=GREEDY)[0]
        assert got == alone


def test_seeded_sampling_is_reproducible_and_sampling_differs_from_greedy():
    model = tiny_lm()
    ids, mask = left_pad([[1, 2, 3]] * 4)
    hot = SamplingConfig(temperature=1.5)
    first = generate(model, ids, mask, max_new_tokens=10, sampling=hot, generator=torch.Generator().manual_seed(1))
    second = generate(model, ids, mask, max_new_tokens=10, sampling=hot, generator=torch.Generator().manual_seed(1))
    assert first == second
    assert len({tuple(row) for row in first}) > 1  # rows sample independently


def test_eos_and_stop_callback_end_rows():
    model = tiny_lm()
    ids, mask = left_pad([[1, 2, 3]])
    free = generate(model, ids, mask, max_new_tokens=10, sampling=GREEDY)[0]
    eos = free[3]
    with_eos = generate(model, ids, mask, max_new_tokens=10, sampling=GREEDY, eos_id=eos)[0]
    assert with_eos == free[: free.index(eos)]
    stopped = generate(model, ids, mask, max_new_tokens=10, sampling=GREEDY, stop=lambda row: len(row) == 2)[0]
    assert stopped == free[:2]


def test_streaming_callback_sees_every_step():
    model = tiny_lm()
    seen = []
    generate(model, *left_pad([[1, 2]]), max_new_tokens=5, sampling=GREEDY,
             on_token=lambda ids, running: seen.append(int(ids[0])))
    assert len(seen) == 5


def test_left_pad_and_positions():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert positions_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    with pytest.raises(ValueError):
        left_pad([[]])


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    assert torch.isfinite(filter_logits(logits, top_p=0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.81)).tolist() == [[True, True, True, False]]


def test_greedy_is_argmax_and_sampling_respects_top_k():
    logits = torch.randn(64, 10)
    assert torch.equal(sample_next(logits, GREEDY), logits.argmax(-1))
    draws = sample_next(logits, SamplingConfig(temperature=1.0, top_k=1), torch.Generator().manual_seed(0))
    assert torch.equal(draws, logits.argmax(-1))


@pytest.mark.parametrize("kwargs", [dict(temperature=-1), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)])
def test_sampling_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_tied_embeddings_share_one_tensor():
    model = tiny_lm(tied=True)
    assert model.head.weight.data_ptr() == model.embedder.tokens.weight.data_ptr()


def short_context_lm(context: int, seed: int = 0) -> CausalLM:
    """A model whose learned position table ends at ``context``: it cannot read one token more."""
    return position_sensitive_lm(seed, context)


def documented_window_greedy(model: CausalLM, prompt: list[int], steps: int, context: int):
    """Brute force of the documented slide: once the window holds more than ``context`` tokens it keeps its last
    ``context // 2``; each step runs the full forward over the window from position 0.

    Returns (tokens, ``[steps, V]`` logits, the window length each step read).
    """
    window, tokens, logits, lengths = list(prompt), [], [], []
    with torch.no_grad():
        for _ in range(steps):
            if len(window) > context:
                window = window[-(context // 2):]
            lengths.append(len(window))
            ids = torch.tensor([window])
            logits.append(model(TokenBatch(mask=torch.ones_like(ids, dtype=torch.bool), ids=ids,
                                           positions=torch.arange(len(window))[None]))[0, -1])
            tokens.append(int(logits[-1].argmax()))
            window.append(tokens[-1])
    return tokens, torch.stack(logits), lengths


def test_generation_slides_past_the_context_exactly_as_specified():
    """60 tokens from a 16-token model: each step reads the documented window (brute force agrees)."""
    context, prompt = 16, [5, 6, 7, 8, 9, 10, 11]
    model = short_context_lm(context)
    got = generate(model, *left_pad([prompt]), max_new_tokens=60, sampling=GREEDY, context=context)[0]
    assert got == documented_window_greedy(model, prompt, 60, context)[0] and len(got) == 60


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize(("prompt_len", "steps"), [
    (5, 4),  # the last step reads exactly `context` tokens (prompt + generated so far == context): no slide yet
    (5, 5),  # ... and the step after holds context + 1: it slides
    (8, 2),  # a prompt of exactly `context` tokens is read whole, then the next step slides
])
def test_generation_reads_the_whole_context_and_slides_only_past_it(prompt_len, steps, use_cache):
    """At the boundary, every step's logits equal the brute-force full forward over the documented window."""
    context = 8
    model = short_context_lm(context, seed=2)
    prompt = [3, 17, 29, 41, 8, 12, 36, 21][:prompt_len]
    expected_tokens, expected_logits, lengths = documented_window_greedy(model, prompt, steps, context)
    assert max(lengths) == context  # the boundary is reached: some step reads the whole context
    seen = []
    hook = model.head.register_forward_hook(lambda module, inputs, out: seen.append(out[0]))
    try:
        got = generate(model, *left_pad([prompt]), max_new_tokens=steps, sampling=GREEDY, context=context,
                       use_cache=use_cache)[0]
    finally:
        hook.remove()
    assert len(seen) == steps
    for step, (ours, theirs, n) in enumerate(zip(seen, expected_logits, lengths, strict=True)):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5, msg=lambda m, step=step, n=n: (
            f"step {step} should read the documented {n}-token window (context {context}) but its logits differ: "
            f"slid too early or too late? {m}"))
    assert got == expected_tokens


def test_sliding_generation_cached_equals_uncached_and_batched_equals_alone():
    context = 12
    model = short_context_lm(context, seed=1)
    prompts = [[1], [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17]]  # rows slide at different steps
    ids, mask = left_pad(prompts)
    cached = generate(model, ids, mask, max_new_tokens=30, sampling=GREEDY, context=context)
    uncached = generate(model, ids, mask, max_new_tokens=30, sampling=GREEDY, context=context, use_cache=False)
    assert cached == uncached
    for prompt, got in zip(prompts, cached, strict=True):
        assert got == generate(model, *left_pad([prompt]), max_new_tokens=30, sampling=GREEDY, context=context)[0]


def test_a_prompt_longer_than_the_context_is_refused_by_the_core():
    with pytest.raises(ValueError, match="longer than the context"):
        generate(short_context_lm(8), *left_pad([list(range(9))]), max_new_tokens=2, context=8)


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_ids_past_the_tokenizers_vocabulary_are_never_generated(temperature: float):
    """A model with more embedding rows than its tokenizer has tokens (Hugging Face pads them): with
    ``vocab_size`` only real ids come out, and without it the same model does emit padding ids."""
    model = tiny_lm()
    with torch.no_grad():
        model.head.weight[VOCAB // 2:] += 5.0  # make the "padding" rows the likeliest
    ids, mask = left_pad([[1, 2, 3]])
    sampling = SamplingConfig(temperature=temperature)
    kept = generate(model, ids, mask, max_new_tokens=30, sampling=sampling, vocab_size=VOCAB // 2,
                    generator=torch.Generator().manual_seed(0))
    free = generate(model, ids, mask, max_new_tokens=30, sampling=sampling, generator=torch.Generator().manual_seed(0))
    assert max(kept[0]) < VOCAB // 2 and max(free[0]) >= VOCAB // 2
