"""The per-patch CNN of ``image_local`` in channels-last memory order against the default one.

Run: ``python benchmarks/bench_patch_cnn.py [--repeats 5]``; writes ``benchmarks/results/patch_cnn.md``.

:class:`~tokformer.tokenizers.image_local.PatchCNN` turns every patch into a token with a few
3x3 convolutions and 2x2 max-pools. On CPU, oneDNN runs both faster when the channels are the
innermost dimension (NHWC) than on PyTorch's default NCHW layout, so the module converts its
input to ``torch.channels_last``. This times one forward and backward pass of the same weights
on the same patches both ways: the module as it is, and its layers applied to the NCHW tensor
(the reference). Interleaved rounds of 20 batches, fresh patches every batch (drawn before the
timing, both ways the same), median (min-max), at 1 thread and all cores; the two outputs are
checked to agree before timing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from einops import rearrange
from harness import (
    MIN_REPEATS,
    Machine,
    interleave,
    markdown_table,
    ratio_cell,
    thread_counts,
    torch_threads,
    write_results,
)

from tokformer.tokenizers.image_local import PatchCNN

# (name, patch side, first conv width, patches per batch): the vqa task's defaults (2 x 2 patches of a
# 64 px picture, batch 32) and a width-32 CNN on 16 px patches (the birds experiment's local tokenizer)
SHAPES = (("vqa defaults: 32 px patches, width 8", 32, 8, 32 * 4),
          ("16 px patches, width 32", 16, 32, 32 * 16))


def reference_forward(cnn: PatchCNN, patches: torch.Tensor) -> torch.Tensor:  # [n, C*P*P] -> [n, d]
    """The same layers on the NCHW tensor, as the module ran before it converted its input."""
    x = patches.reshape(-1, cnn.channels, cnn.patch_size, cnn.patch_size)  # [n, C, P, P], NCHW
    return cnn.out(rearrange(cnn.convs(x), "n c h w -> n (c h w)"))


BATCHES_PER_ROUND = 20  # a pass takes milliseconds: a round of 20 keeps timer and scheduler noise small


def patches(n: int, patch: int, seed: int) -> torch.Tensor:  # [n, 3*P*P]
    return torch.randn(n, 3 * patch * patch, generator=torch.Generator().manual_seed(seed))


def round_batches(n: int, patch: int, repeats: int) -> dict[int, list[torch.Tensor]]:
    """Each round's own batches (round -1 is the warm-up's), drawn once before any timing: drawing them
    inside a timed call would add the same cost to both cases and pull their ratio toward 1."""
    return {round_: [patches(n, patch, 1000 * (round_ + 2) + batch) for batch in range(BATCHES_PER_ROUND)]
            for round_ in range(-1, repeats)}


def case(cnn: PatchCNN, forward: Callable[[PatchCNN, torch.Tensor], torch.Tensor],
         batches: dict[int, list[torch.Tensor]]) -> Callable[[int], None]:
    def run(round_: int) -> None:
        for x in batches[round_]:
            cnn.zero_grad(set_to_none=True)
            forward(cnn, x).square().mean().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    args = parser.parse_args()
    machine = Machine(("torch",))
    rows = []
    for name, patch, width, n in SHAPES:
        torch.manual_seed(0)
        cnn = PatchCNN(3, patch, 64, width=width, depth=2)
        probe, batches = patches(n, patch, 0), round_batches(n, patch, args.repeats)
        with torch.no_grad():  # same function: only the order of the sums differs
            torch.testing.assert_close(cnn(probe), reference_forward(cnn, probe), rtol=1e-4, atol=1e-5)
        for threads in thread_counts():
            with torch_threads(threads):
                timings = interleave({"channels-last": case(cnn, lambda m, x: m(x), batches),
                                      "NCHW": case(cnn, reference_forward, batches)}, args.repeats)
            ours, reference = timings["channels-last"], timings["NCHW"]
            work = n * BATCHES_PER_ROUND
            rows.append([name, str(threads), reference.rate_cell(work, ",.0f"), ours.rate_cell(work, ",.0f"),
                         ratio_cell(ours, reference)])
    text = "\n".join([
        "# The per-patch CNN: channels-last against NCHW",
        "",
        f"`PatchCNN` (depth 2: 3x3 conv, ReLU, 2x2 max-pool, twice; flattened; linear to 64), fp32. One forward and "
        f"backward pass per batch of patches, {BATCHES_PER_ROUND} batches a round; median (min-max) of {args.repeats} "
        "interleaved rounds, fresh patches every batch (drawn before the timing). NCHW is the same module's layers "
        "applied to the tensor as PyTorch lays it out; channels-last is the module as it runs "
        "(`python benchmarks/bench_patch_cnn.py`).",
        "",
        markdown_table(["shape", "threads", "NCHW patches/s", "channels-last patches/s",
                        "speed-up (NCHW time / channels-last time)"], rows),
        "",
        machine.line("1 thread and all cores"),
    ])
    write_results("patch_cnn.md", text)


if __name__ == "__main__":
    main()
