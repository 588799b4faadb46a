"""tokformer ViT vs timm VisionTransformer: training and inference throughput, side by side.

Both models have identical dimensions *and identical weights* (tokformer's is converted
from timm's), see the same batch, run in the same process with the same threads and
dtype. tokformer's timed step includes tokenization (patch extraction), since timm's
includes its patch-embedding convolution. Training step = forward + cross-entropy +
backward + AdamW step. Repeats are interleaved (tokformer, timm, tokformer, ...) and the
median is reported, because the CPU may be shared with other jobs.

    python benchmarks/bench_vit.py                      # ViT-Tiny width, 64px, patch 8, depth 6
    python benchmarks/bench_vit.py --img-size 224 --patch-size 16 --depth 12 --batch-size 8

Prints a Markdown table and writes benchmarks/results/vit.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from tokformer.tokenizers.timm_vit import from_timm

RESULTS = Path(__file__).parent / "results" / "vit.md"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--patch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=192, help="embed_dim (ViT-Tiny: 192)")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadiest on a shared CPU)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats; the median is reported")
    p.add_argument("--no-cuda", action="store_true", help="skip CUDA even when available")
    return p.parse_args()


def seconds_per_step(step: Callable[[], None], steps: int, sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps


def build(args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, Callable[[], None]]]:
    """A training step and an inference step for each library, on the same weights and batch."""
    torch.manual_seed(0)
    timm_model = VisionTransformer(
        img_size=args.img_size, patch_size=args.patch_size, embed_dim=args.dim, depth=args.depth,
        num_heads=args.heads, num_classes=args.classes,
    )
    tokenizer, tok_model = from_timm(timm_model, mean=None, std=None)
    timm_model.to(device)
    tok_model.to(device)
    images = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device)
    labels = torch.randint(0, args.classes, (args.batch_size,), device=device)
    forward = {
        "tokformer": lambda: tok_model(tokenizer.batch(images)),
        "timm": lambda: timm_model(images),
    }
    models = {"tokformer": tok_model, "timm": timm_model}
    steps: dict[str, dict[str, Callable[[], None]]] = {}
    for name, model in models.items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train_step(model=model, optimizer=optimizer, run=forward[name]) -> None:
            model.train()
            loss = torch.nn.functional.cross_entropy(run(), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        def infer_step(model=model, run=forward[name]) -> None:
            model.eval()
            with torch.inference_mode():
                run()

        steps[name] = {"train": train_step, "inference": infer_step}
    return steps


def measure(args: argparse.Namespace, device: torch.device) -> dict[tuple[str, str], float]:
    """Median images/s per (library, mode), repeats interleaved across libraries."""
    steps = build(args, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fns in steps.values():  # warm up: allocator, kernels, optimizer state
        for fn in fns.values():
            seconds_per_step(fn, 2, sync)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for mode in ("train", "inference"):
            for name, fns in steps.items():
                times.setdefault((name, mode), []).append(seconds_per_step(fns[mode], args.steps, sync))
    return {key: args.batch_size / statistics.median(ts) for key, ts in times.items()}


def table(results: dict[str, dict[tuple[str, str], float]]) -> str:
    lines = [
        "| device | mode | tokformer img/s | timm img/s | ratio (tokformer / timm) |",
        "|---|---|---:|---:|---:|",
    ]
    for device, r in results.items():
        for mode in ("train", "inference"):
            ours, theirs = r[("tokformer", mode)], r[("timm", mode)]
            lines.append(f"| {device} | {mode} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not args.no_cuda:
        devices.append(torch.device("cuda"))
    results = {str(d): measure(args, d) for d in devices}
    setup = (
        f"ViT: embed_dim {args.dim}, depth {args.depth}, heads {args.heads}, image {args.img_size}px, "
        f"patch {args.patch_size} ({(args.img_size // args.patch_size) ** 2} patches + class token), "
        f"{args.classes} classes; batch {args.batch_size}, fp32, {args.threads} CPU thread(s); "
        f"median of {args.repeats} interleaved repeats of {args.steps} steps.\n"
        f"torch {torch.__version__}, timm {timm.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.cuda.get_device_name() if len(devices) > 1 else 'no CUDA'}."
    )
    report = f"# tokformer ViT vs timm VisionTransformer\n\n{setup}\n\n{table(results)}\n"
    print(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
