"""The training loop: one loop for every task, one process or many.

Per optimizer step: set the scheduled learning rate, run ``grad_accum`` micro-batches
(forward under autocast, backward; DDP or FSDP synchronise gradients on the last one only),
agree across processes on the loss and on a stop request, stop on a non-finite loss,
clip, step. Every ``eval_every`` steps: evaluate, checkpoint, keep the best, watch the
held-out loss for overfitting and stop early when the best metric stops improving
(:mod:`tokformer.engine.watch`). At the end rank 0 scores the task's baselines on the
held-out set, beside the best checkpoint's metrics (:mod:`tokformer.engine.report`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from tokformer import files
from tokformer.atomic import write_json_atomic
from tokformer.engine import fsdp
from tokformer.engine.data import StepSampler, eval_batches, to_device
from tokformer.engine.finetune import InitialWeights, load_initial
from tokformer.engine.metrics import MeanMeter, MetricLog, plot_metrics
from tokformer.engine.optim import build_optimizer, lr_at, set_lr
from tokformer.engine.progress import LOGGER, progress
from tokformer.engine.recompute import checkpoint_activations
from tokformer.engine.report import Evaluation
from tokformer.engine.rng import rng_state, seed_everything, set_rng_state
from tokformer.engine.watch import DEFAULT_PATIENCE, Watch
from tokformer.errors import CheckpointError, ConfigError, DataError, TrainingError
from tokformer.runtime.config import RunConfig, TrainConfig
from tokformer.runtime.distributed import Dist, all_sum, barrier, gather
from tokformer.runtime.task import Task
from tokformer.signals import data_worker_init, stop_on_signals
from tokformer.store import checkpoints
from tokformer.store.budget import TRAINING_BYTES_PER_PARAMETER, check_memory, planned_size
from tokformer.store.steps import list_checkpoints, prune, remove_partial, step_dir
from tokformer.store.weights import check_fits, damaged

log = logging.getLogger(LOGGER)


def _stop_workers(batches: Iterator[Any]) -> None:
    """Shut a DataLoader iterator's worker processes down now, not whenever the iterator is collected:
    they ignore stop signals (:func:`~tokformer.signals.data_worker_init`), so multiprocessing's SIGTERM
    to them at interpreter exit would not end them, and the process would wait for them for good.
    (torch has no public call for it; the iterator's own ``__del__`` calls this one.)"""
    shutdown = getattr(batches, "_shutdown_workers", None)  # only a multi-process iterator has workers
    if shutdown is not None:
        shutdown()


@dataclass
class RunResult:
    """What :func:`tokformer.train` returns.

    Attributes:
        run_dir: the run directory (config, checkpoints, metrics, plots).
        step: optimizer steps done.
        metrics: the last evaluation's metrics (``loss`` and the task's).
        best: ``{"step", "metric", "value"}`` of the best checkpoint, or None.
        interrupted: stopped by SIGINT/SIGTERM (a checkpoint was saved).
        signal: the number of that signal (the CLI exits with 128 + it), else None.
        stopped_early: stopped by ``early_stop`` (the run ended normally; ``best`` is the checkpoint to use).
        report: the best checkpoint's metrics beside the task's baselines on the held-out set
            (rank 0, when the run has an evaluation set and was not interrupted), else None.
    """

    run_dir: Path
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    interrupted: bool = False
    signal: int | None = None
    stopped_early: bool = False
    report: Evaluation | None = None


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def evaluate_model(
    task: Task, model: nn.Module, dataset: Dataset, d: Dist, batch_size: int, precision: str, show: bool,
    raw: nn.Module | None = None,
) -> dict[str, float]:
    """One evaluation pass of ``model`` over ``dataset``: mean loss and the task's ``(sum, count)``
    metrics summed over all processes, plus the task's pass-level metrics (:meth:`Task.eval_end`)
    from every process's :meth:`Task.eval_batch` values. ``raw`` is ``model`` unwrapped (not
    compiled), what ``eval_batch`` gets; by default ``model`` itself."""
    meter, outputs = MeanMeter(), []
    raw = model if raw is None else raw
    was_training = model.training
    model.eval()
    batches = eval_batches(len(dataset), batch_size, d.world, d.rank)
    with torch.no_grad(), autocast(d.device, precision):
        for idx in progress(show, iterable=batches, desc="eval", unit="batch", leave=False):
            batch = to_device(task.collate([dataset[i] for i in idx], train=False), d.device)
            out = task.step(model, batch)
            meter.add_step(out)
            kept = task.eval_batch(raw, batch, out)
            if kept is not None:
                outputs.append(kept)
    model.train(was_training)
    every = [value for shard in gather(outputs, d) for value in shard]  # a collective: all ranks, same list
    return {**meter.reduce(d), **task.eval_end(every)}


def budget_warnings(tc: TrainConfig, device: torch.device) -> list[str]:
    """Settings that run but cost more than the user likely expects, said once at the start."""
    warnings = []
    if tc.warmup_steps >= tc.steps:
        warnings.append(f"the budget of {tc.steps} steps ends within warmup_steps={tc.warmup_steps}: the learning "
                        f"rate never reaches lr={tc.lr:g}; lower --warmup-steps or raise --steps")
    if tc.precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.append("precision bf16 on a CPU without native bf16 instructions (no avx512_bf16 or amx_bf16): "
                        "bf16 is emulated and typically several times slower than fp32 here; use --precision fp32")
    return warnings


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (x86 AVX512-BF16 or AMX; ARM's bf16 extension)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # not Linux: no way to tell, so no warning
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16", "bf16"))


class Trainer:
    """Trains ``task`` under ``cfg`` in ``run_dir``; ``resume`` continues from its latest checkpoint."""

    def __init__(self, cfg: RunConfig, task: Task, run_dir: Path, d: Dist, *, resume: bool, quiet: bool,
                 initial: InitialWeights | None = None, on_first_checkpoint: Callable[[], None] | None = None) -> None:
        self.cfg, self.tc, self.task, self.run_dir, self.d = cfg, cfg.train, task, run_dir, d
        self.resume, self.show = resume, d.is_main and not quiet
        self.initial = initial  # init_from's weights (a new fine-tuning run), loaded into the built model
        self.on_first_checkpoint = on_first_checkpoint  # called once the run has a checkpoint: it stands
        per_step = d.world * self.tc.grad_accum
        if self.tc.batch_size % per_step:
            raise ConfigError(
                f"batch_size={self.tc.batch_size} must be divisible by processes x grad_accum = {per_step}"
            )
        self.micro_batch = self.tc.batch_size // per_step
        self.tokenizer_hash: str | None = None  # set by fit() once the tokenizer is in the run directory
        self.raw: nn.Module | None = None  # the model as built (set by fit()): what eval_batch gets
        self.model_sharded = d.active and self.tc.strategy == "fsdp"  # FSDP shards the model (one process: nothing to)

    def fit(self) -> RunResult:
        task, tc, d = self.task, self.tc, self.d
        if self.resume:
            task.load_assets(self.run_dir)
        else:  # a model too large is refused before any data are drawn or tokenized for it
            check_memory(planned_size(task.planned_model), TRAINING_BYTES_PER_PARAMETER,
                         f"task {self.cfg.task}'s config")
        task.setup(self.run_dir, d)  # rank 0 prepares the data once, the others wait and load it
        train_set, eval_set = task.train_dataset(), task.eval_dataset()
        if tc.epochs is not None:  # the budget in passes over the data: steps follow from its size
            self.tc = tc = dataclasses.replace(tc, steps=max(1, math.ceil(tc.epochs * len(train_set) / tc.batch_size)))
            self._info("%g epochs of %d samples in batches of %d: %d steps", tc.epochs, len(train_set),
                       tc.batch_size, tc.steps)
        watch = Watch(self._patience(eval_set))
        if d.is_main:
            for warning in budget_warnings(tc, d.device):
                log.warning(warning)
        if not self.resume:
            # the others may still be reading in setup what rank 0 wrote there: all meet before rank 0
            # writes it again (a tokenizer file rewritten while rank 1 read it was empty there)
            barrier(d)
            if d.is_main:
                task.save_assets(self.run_dir)
        # recorded in every checkpoint, so loading can refuse a tokenizer swapped in later (rank 0 saves)
        self.tokenizer_hash = (checkpoints.tokenizer_fingerprint(self.run_dir, task.tokenizer_dirs()) if d.is_main
                               else None)
        check_memory(planned_size(task.build_model), TRAINING_BYTES_PER_PARAMETER, f"task {self.cfg.task}'s config")
        seed_everything(tc.seed)  # weights depend on the seed only, not on data preparation
        raw = task.build_model()
        if self.initial is not None:
            load_initial(raw, self.initial, task.fresh_on_mismatch)
            self.initial = None  # loaded once; the tensors are not needed any more
        raw = raw.to(d.device)
        seed_everything(tc.seed + d.rank)  # per-rank streams: each rank draws its own dropout masks
        if tc.activation_checkpointing:
            blocks = checkpoint_activations(raw)
            self._info("activation checkpointing: %d Transformer blocks recompute their activations in backward",
                       blocks)
        if self.model_sharded:
            units = fsdp.shard_model(raw, d, tc.precision)
            self._info("fsdp: %d units sharded over %d processes", units, d.world)
        elif tc.strategy == "fsdp":
            self._info("fsdp with one process: nothing to shard; checkpoints are sharded ones (one shard)")
        model: nn.Module = torch.compile(raw) if tc.compile else raw
        self.raw, eval_model = raw, model  # DDP's forward may talk to other ranks; evaluation must not
        if d.active and not self.model_sharded:
            model = DistributedDataParallel(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
        optimizer = build_optimizer(raw, tc)
        step, best, last_metrics = 0, None, {}
        logbook = MetricLog(self.run_dir) if d.is_main else None
        if self.resume:
            step, best, watch, last_metrics = self._restore(raw, optimizer, logbook, watch)
        sampler = StepSampler(len(train_set), self.micro_batch, d.world, d.rank, tc.seed, start=step * tc.grad_accum,
                              order=functools.partial(task.epoch_order, train_set))
        if sampler.batches_per_epoch == 0:
            raise DataError(
                f"the training set has {len(train_set)} samples, fewer than one batch of "
                f"{self.micro_batch * d.world}; lower batch_size"
            )
        self.batches_per_epoch = sampler.batches_per_epoch
        # Its own generator: DataLoader would otherwise draw its workers' base seed from torch's
        # global RNG each time an iterator starts, and a resumed run starts one more than a straight one.
        # Workers leave stopping to this process: killed by a SIGTERM sent to the process group, they
        # failed the run before it could save its stop checkpoint.
        loader = DataLoader(train_set, batch_sampler=sampler, collate_fn=functools.partial(task.collate, train=True),
                            num_workers=tc.num_workers, worker_init_fn=data_worker_init,
                            generator=torch.Generator().manual_seed(tc.seed))
        batches = iter(loader)
        # a resumed run that has nothing left to do still reports its last evaluation; one that early
        # stopping had ended stays ended (a larger --early-stop, or 0, on resume goes on)
        result = RunResult(self.run_dir, step, best=best, metrics=dict(last_metrics),
                           stopped_early=watch.should_stop and step < tc.steps)
        if result.stopped_early:
            self._info("the run stopped early at step %d (no better %s for %d evaluations): nothing to train; "
                       "a larger --early-stop, or 0, goes on", step, task.best_metric, watch.stale)
        meter, t0, samples = MeanMeter(), time.perf_counter(), 0
        bar = progress(self.show, total=tc.steps, initial=step, desc="train", unit="step")
        model.train()
        try:
            with stop_on_signals() as stop:
                while step < tc.steps and not result.stopped_early:
                    set_lr(optimizer, lr_at(step, tc))
                    loss = self._accumulate(model, batches, meter)
                    # one collective for both: the loss summed over ranks, and how many ranks got a stop signal
                    loss_sum, stop_votes = all_sum(torch.tensor([loss, float(stop.requested)], dtype=torch.float64),
                                                   d).tolist()
                    if not math.isfinite(loss_sum):
                        optimizer.zero_grad(set_to_none=True)
                        raise TrainingError(self._nan_message(step, loss_sum))
                    grad_norm = self._clip(raw)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    step += 1
                    samples += tc.batch_size
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss_sum / d.world:.4f}", lr=f"{lr_at(step - 1, tc):.2e}")
                    if step % tc.log_every == 0:
                        rate = samples / (time.perf_counter() - t0)
                        self._log(logbook, "train", step, {**meter.reduce(d), "lr": lr_at(step - 1, tc),
                                                          "grad_norm": grad_norm, "samples_per_s": rate})
                        meter, t0, samples = MeanMeter(), time.perf_counter(), 0
                    # a signal saves where it stopped but evaluates only on the schedule: an extra
                    # evaluation would count towards early stopping (and could become the best), so
                    # the resumed run would stop, and keep, other steps than one never stopped
                    scheduled = step % tc.eval_every == 0 or step == tc.steps
                    if scheduled:
                        result.metrics = self._evaluate(eval_model, eval_set, logbook, step)
                        best = self._watch(watch, step, best, result.metrics)
                    if scheduled or stop_votes > 0:
                        self._save(raw, optimizer, step, best, result.metrics, watch)
                    if stop_votes > 0:
                        result.interrupted = True
                        result.signal = max(s or 0 for s in gather(stop.signum, d)) or None  # a collective
                        self._info("stopped at step %d by a signal; checkpoint saved in %s", step, self.run_dir)
                        break
                    if watch.should_stop and step < tc.steps:  # at the last step it is the budget that ends it
                        result.stopped_early = True
                        self._info("no better %s for %d evaluations: stopped early at step %d; the best checkpoint "
                                   "is step %s", task.best_metric, watch.stale, step, best["step"] if best else "-")
                        break
        finally:
            _stop_workers(batches)
            bar.close()
            if logbook is not None:
                logbook.close()
                if (self.run_dir / "metrics.jsonl").exists():
                    plot_metrics(self.run_dir)
        result.step, result.best = step, best
        if d.is_main and eval_set is not None and best is not None and not result.interrupted:
            result.report = self._report(eval_set, best)
        return result

    def _patience(self, eval_set: Dataset | None) -> int:
        """``early_stop``, or by default on (``DEFAULT_PATIENCE``) for the user's own data only."""
        if eval_set is None:
            return 0
        if self.tc.early_stop is not None:
            return self.tc.early_stop
        if not self.task.user_data:
            return 0
        self._info("early stopping after %d evaluations without a better %s (the data are yours; "
                   "--early-stop 0 turns it off)", DEFAULT_PATIENCE, self.task.best_metric)
        return DEFAULT_PATIENCE

    def _watch(self, watch: Watch, step: int, best: dict[str, Any] | None,
               metrics: dict[str, float]) -> dict[str, Any] | None:
        """The new best after this evaluation; counts it in ``watch`` (rank 0 warns of overfitting)."""
        name = self.task.best_metric
        value = metrics.get(name)
        improved = value is not None and math.isfinite(value) and (
            best is None or (value > best["value"] if self.task.higher_is_better else value < best["value"]))
        if improved:
            best = {"step": step, "metric": name, "value": value}
        warning = watch.update(step, metrics.get("loss"), improved)
        if warning and self.d.is_main:
            log.warning(warning)
        return best

    def _report(self, eval_set: Dataset, best: dict[str, Any]) -> Evaluation:
        """The best checkpoint's held-out metrics (saved in its state) beside the task's baselines."""
        state = files.read_json(step_dir(self.run_dir, best["step"]) / "state.json")  # a pipe there: refused
        return Evaluation(state["metrics"], self.task.baselines(eval_set),
                          f"the held-out split, best checkpoint (step {best['step']})")

    def _accumulate(self, model: nn.Module, batches: Any, meter: MeanMeter) -> float:
        """Forward and backward ``grad_accum`` micro-batches; returns this rank's mean loss."""
        total = 0.0
        for i in range(self.tc.grad_accum):
            batch = to_device(next(batches), self.d.device)
            last = i == self.tc.grad_accum - 1
            sync = (contextlib.nullcontext() if last or not self.d.active
                    else fsdp.no_gradient_sync(self.raw) if self.model_sharded else model.no_sync())
            with sync:
                with autocast(self.d.device, self.tc.precision):
                    out = self.task.step(model, batch)
                (out.loss / self.tc.grad_accum).backward()
            meter.add_step(out)
            total += float(out.loss.detach()) / self.tc.grad_accum
        return total

    def _clip(self, model: nn.Module) -> float:
        max_norm = self.tc.grad_clip if self.tc.grad_clip > 0 else math.inf
        return float(fsdp.full(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))

    def _evaluate(self, model: nn.Module, eval_set: Dataset | None, logbook: MetricLog | None,
                  step: int) -> dict[str, float]:
        if eval_set is None:
            return {}
        batch = max(1, self.tc.batch_size // self.d.world)
        with fsdp.gathered(self.raw) if self.model_sharded else contextlib.nullcontext():
            metrics = evaluate_model(self.task, model, eval_set, self.d, batch, self.tc.precision, self.show, self.raw)
        self._log(logbook, "eval", step, metrics)
        self._info("step %d eval: %s", step, ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        return metrics

    def _info(self, message: str, *args: Any) -> None:
        if self.d.is_main:
            log.info(message, *args)

    def _log(self, logbook: MetricLog | None, split: str, step: int, values: dict[str, float]) -> None:
        if logbook is not None:
            logbook.write(split, step, values)

    def _save(self, raw: nn.Module, optimizer: torch.optim.Optimizer, step: int,
              best: dict[str, Any] | None, metrics: dict[str, float], watch: Watch) -> None:
        """Checkpoint ``step`` and prune old ones, keeping ``best``: rank 0 writes it, or under
        ``--strategy fsdp`` every rank writes its shard (:mod:`tokformer.store.checkpoints`)."""
        rngs = gather(rng_state(), self.d)  # a collective: every rank's generators, for exact resume
        state = {
            "step": step,
            "schedule": {"step": step, "lr": lr_at(max(step - 1, 0), self.tc)},
            "data": self._data_position(step),
            "rng": rngs,
            "best": best,
            "watch": watch.state(),
            "metrics": metrics,
            checkpoints.TOKENIZER_HASH: self.tokenizer_hash,
        }
        checkpoints.save(self.run_dir, step, raw, optimizer, state, self.d, sharded_layout=self.tc.strategy == "fsdp")
        if self.d.is_main:
            if best is not None:
                write_json_atomic(self.run_dir / checkpoints.BEST_FILE, best)
            prune(self.run_dir, self.tc.keep_last, {best["step"]} if best else set())
            if self.on_first_checkpoint is not None:
                self.on_first_checkpoint()
                self.on_first_checkpoint = None

    def _data_position(self, step: int) -> dict[str, int]:
        """Where the data stream stands after ``step`` steps (resume recomputes it from the step;
        it is saved for people and tools reading the checkpoint)."""
        consumed = step * self.tc.grad_accum
        epoch, batch = divmod(consumed, self.batches_per_epoch)
        return {"micro_batch": consumed, "epoch": epoch, "batch_in_epoch": batch,
                "micro_batch_size": self.micro_batch, "world": self.d.world, "seed": self.tc.seed}

    def _restore(self, raw: nn.Module, optimizer: torch.optim.Optimizer, logbook: MetricLog | None,
                 watch: Watch) -> tuple[int, dict[str, Any] | None, Watch, dict[str, float]]:
        """Load the latest complete checkpoint into model, optimizer and RNGs; returns its step,
        best and evaluation watch."""
        if self.d.is_main:
            remove_partial(self.run_dir)
        if not list_checkpoints(self.run_dir):  # died before its first save: start over
            self._info("no checkpoint in %s yet; starting from step 0", self.run_dir)
            if logbook is not None:
                logbook.truncate_after(0)
            return 0, None, watch, {}
        path, state = self._latest_readable(raw, optimizer)
        rngs = state["rng"]
        if len(rngs) != self.d.world:
            self._info("checkpoint has RNG states of %d processes, this run has %d: not bitwise exact", len(rngs),
                       self.d.world)
        set_rng_state(rngs[self.d.rank % len(rngs)])
        if logbook is not None:
            logbook.truncate_after(state["step"])
        self._info("resumed from %s (step %d)", path, state["step"])
        return (state["step"], state["best"], Watch.restore(watch.patience, state.get("watch")),
                state.get("metrics") or {})

    def _latest_readable(self, raw: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Path, dict[str, Any]]:
        """Load the newest checkpoint that reads cleanly into ``raw`` and ``optimizer``; a damaged or
        incomplete newer one (a disk error, a hand-edited file, a lost shard) is reported and
        skipped, so resuming loses only its steps. Every rank reads the same files, so all skip alike."""
        newest_first = [step_dir(self.run_dir, s) for s in reversed(list_checkpoints(self.run_dir))]
        for path in newest_first[:-1]:
            try:
                return path, self._load_checkpoint(raw, optimizer, path)
            except CheckpointError as e:
                log.warning("%s; resuming from the checkpoint before it", e)
        return newest_first[-1], self._load_checkpoint(raw, optimizer, newest_first[-1])

    def _load_checkpoint(self, model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> dict[str, Any]:
        """Weights and optimizer state of checkpoint ``path`` (either layout) into ``model`` and
        ``optimizer`` (sharded or not: whole tensors are re-sliced to this run's processes);
        returns its training state. Everything is read and checked before anything is loaded."""
        checkpoints.check_tokenizer(path, self.task.tokenizer_dirs())
        saved = checkpoints.read_checkpoint(path)
        check_fits(model, saved.weights, f"checkpoint {path}", "the run's config and tokenizer")
        try:  # an optimizer state of the wrong shape or types (an edited state.json) is a damaged checkpoint
            if not saved.by_name and not self.model_sharded:  # as it was saved: plain load_state_dict
                model.load_state_dict(saved.weights)
                optimizer.load_state_dict(saved.optimizer)
                return saved.state
            by_name = (saved.optimizer if saved.by_name
                       else fsdp.optimizer_state_by_name(saved.optimizer, model, optimizer))
            fsdp.load_full_state(model, optimizer, saved.weights, by_name)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as e:
            raise damaged(path / "state.json", f"its optimizer state does not fit: {e}") from None
        return saved.state

    def _nan_message(self, step: int, loss: float) -> str:
        saved = list_checkpoints(self.run_dir)
        keep = (f"the last good checkpoint is step {saved[-1]} (resume with --resume {self.run_dir})"
                if saved else "no checkpoint was saved yet")
        return (f"loss became {loss} at step {step + 1}; stopped, {keep}. "
                "Try a lower lr, more warmup_steps or grad_clip, or precision fp32")

