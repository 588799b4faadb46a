"""tokformer ViT vs timm VisionTransformer: training and inference throughput, side by side.

Both models have identical dimensions *and identical weights* (tokformer's is converted
from timm's, every parameter randomised first, logits checked equal before timing), see
the same batch, run in the same process with the same threads and dtype. tokformer's
timed step includes tokenization (patch extraction), since timm's includes its
patch-embedding convolution. Training step = forward + cross-entropy + backward + AdamW
step. Method (``harness.py``): interleaved rounds, a new batch each round, median (min-max)
over >= 5 rounds, at 1 thread and at all cores; CUDA too when present.

    python benchmarks/bench_vit.py                      # ViT-Tiny width, 64px, patch 8, depth 6
    python benchmarks/bench_vit.py --img-size 224 --patch-size 16 --depth 12 --batch-size 8

Prints a Markdown table and writes benchmarks/results/vit.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
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
from timm.models.vision_transformer import VisionTransformer

from tokformer.interop.timm import from_timm


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--patch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=192, help="embed_dim (ViT-Tiny: 192)")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=2, help="steps per timed call")
    p.add_argument("--repeats", type=int, default=MIN_REPEATS, help="interleaved rounds; median (min-max) reported")
    p.add_argument("--no-cuda", action="store_true", help="skip CUDA even when available")
    return p.parse_args()


def build(args: argparse.Namespace, device: torch.device) -> dict[str, Callable[[int], None]]:
    """``(library, mode)`` -> one timed call (``args.steps`` steps on the round's own batch)."""
    torch.manual_seed(0)
    timm_model = VisionTransformer(
        img_size=args.img_size, patch_size=args.patch_size, embed_dim=args.dim, depth=args.depth,
        num_heads=args.heads, num_classes=args.classes,
    )
    with torch.no_grad():
        for param in timm_model.parameters():  # LayerNorms left at 1/0 would hide a mix-up
            param.normal_(0.0, 0.05)
    tokenizer, tok_model = from_timm(timm_model, mean=None, std=None)
    timm_model.to(device)
    tok_model.to(device)
    forward = {"tokformer": lambda x: tok_model(tokenizer.batch(x)), "timm": timm_model}

    def batch(round_: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(1000 + round_)
        images = torch.randn(args.batch_size, 3, args.img_size, args.img_size, generator=gen)
        return images.to(device), torch.randint(0, args.classes, (args.batch_size,), generator=gen).to(device)

    check, _ = batch(-2)
    with torch.no_grad():
        diff = (forward["tokformer"](check) - forward["timm"](check)).abs().max().item()
    assert diff < 1e-4, f"tokformer and timm logits differ by {diff}"
    cases: dict[str, Callable[[int], None]] = {}
    for name, model in (("tokformer", tok_model), ("timm", timm_model)):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train(round_: int, model=model, optimizer=optimizer, run=forward[name]) -> None:
            images, labels = batch(round_)
            model.train()
            for _ in range(args.steps):
                torch.nn.functional.cross_entropy(run(images), labels).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        def infer(round_: int, model=model, run=forward[name]) -> None:
            images, _ = batch(round_)
            model.eval()
            with torch.inference_mode():
                for _ in range(args.steps):
                    run(images)

        cases[f"{name} train"], cases[f"{name} inference"] = train, infer
    return cases


def rows(args: argparse.Namespace, device: torch.device, setting: str) -> list[list[str]]:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    timings = interleave(build(args, device), args.repeats, sync=sync)
    images = args.batch_size * args.steps
    out = []
    for mode in ("train", "inference"):
        ours, theirs = timings[f"tokformer {mode}"], timings[f"timm {mode}"]
        out.append([setting, mode, ours.rate_cell(images), theirs.rate_cell(images), ratio_cell(ours, theirs)])
    return out


def main() -> None:
    args = parse_args()
    machine = Machine(("torch", "timm"))
    table = []
    for threads in thread_counts():
        with torch_threads(threads):
            table += rows(args, torch.device("cpu"), f"CPU, {threads} thread(s)")
    if torch.cuda.is_available() and not args.no_cuda:
        table += rows(args, torch.device("cuda"), torch.cuda.get_device_name())
    setup = (
        f"ViT: embed_dim {args.dim}, depth {args.depth}, heads {args.heads}, image {args.img_size}px, "
        f"patch {args.patch_size} ({(args.img_size // args.patch_size) ** 2} patches + class token), "
        f"{args.classes} classes; batch {args.batch_size}, fp32; same weights (logits checked equal); "
        f"img/s median (min-max) of {args.repeats} interleaved rounds of {args.steps} steps, a new batch each round; "
        "ratio = timm time / tokformer time (> 1: tokformer faster), with the range of per-round ratios."
    )
    header = ["device", "mode", "tokformer img/s", "timm img/s", "ratio"]
    report = (f"# tokformer ViT vs timm VisionTransformer\n\n{setup}\n\n{markdown_table(header, table)}\n\n"
              f"{machine.line('1 thread and all cores')}\n")
    write_results("vit.md", report)


if __name__ == "__main__":
    main()
