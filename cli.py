"""The `tokformer` command line: a thin click layer over the library API.

Adding a command: decorate a function with ``@main.command()`` (or a group with
``@main.group()``) and call one library function from it. Errors need no handling
there: :class:`TokformerGroup` turns every ``TokformerError`` raised under any command
into one line and its exit code (2 for bad input, 1 for failed runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import types
import typing
from pathlib import Path
from typing import Any

import click

# Only light imports here: `tokformer --help` must answer without loading torch or the
# engine, so every command imports what it runs inside its own body.
from tokformer.errors import ConfigError, DataError, TokformerError
from tokformer.machine import MAX_WORKERS
from tokformer.signals import sigterm_interrupts

# OSErrors whose fix is in the user's hands: a path that is missing, unreadable or of the wrong kind.
USER_PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
POSITIVE = click.IntRange(min=1)


class FiniteFloat(click.ParamType):
    """A float that is not NaN or infinite (click's FLOAT accepts both), read by the config
    layer's number parser, so a float option and a config value take the same numbers."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from tokformer.numbers import finite_float

        try:
            return finite_float(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


FINITE = FiniteFloat()


class FiniteRange(click.FloatRange):
    """click's FloatRange of a FiniteFloat: NaN compares false with both bounds, so a plain range passes it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        return super().convert(FINITE.convert(value, param, ctx), param, ctx)


class Text(click.ParamType):
    """Text typed on the command line (a prompt, a sentence, a stop string): it must be UTF-8. A shell
    passes any bytes, and Python keeps those that are not UTF-8 as lone surrogates (``$'\\xff'`` is
    ``'\\udcff'``), which no tokenizer or file can hold; named here, not deep in whatever reads it."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            str(value).encode("utf-8")
        except UnicodeEncodeError as e:
            raw = str(value)[e.start].encode("utf-8", "surrogateescape")
            self.fail(f"not UTF-8 text: byte 0x{raw.hex()} at character {e.start}", param, ctx)
        return str(value)


TEXT = Text()


class Device(click.ParamType):
    """A device name, checked as ``train`` checks it (``bogus``, or ``cuda`` without a GPU, is one line
    before anything is loaded); the command gets the name."""

    name = "device"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from tokformer.runtime.distributed import select_device

        try:
            select_device(str(value))
        except ConfigError as e:
            self.fail(str(e), param, ctx)
        return str(value)


DEVICE = Device()
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class OneLineUsageError(click.UsageError):
    """A click usage error (unknown flag, missing argument...) shown as one line, exit code 2.

    Click prints the usage synopsis and a hint above the message; across every command
    we promise one line, so the hint moves to the end of it.
    """

    def show(self, file: Any = None) -> None:
        message = " ".join(self.format_message().split())
        if self.ctx is not None:
            message += ("" if message.endswith((".", "?", ")")) else ".") + f" See '{self.ctx.command_path} --help'."
        click.echo(f"Error: {message}", err=True)


def _one_line(error: click.UsageError) -> OneLineUsageError:
    return error if isinstance(error, OneLineUsageError) else OneLineUsageError(error.format_message(), error.ctx)


class TokformerGroup(click.Group):
    """A click group whose commands report errors as one line, without a traceback.

    ``--debug`` (or TOKFORMER_DEBUG=1) re-raises instead, for the full traceback.
    """

    group_class = type  # subgroups are TokformerGroups too

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:  # a bad option of the group itself: `tokformer --bogus`
            raise _one_line(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            # SIGTERM stops every command as Ctrl-C does (its cleanup runs, exit 143), not only training
            with sigterm_interrupts() if ctx.parent is None else contextlib.nullcontext():
                return super().invoke(ctx)
        except click.UsageError as e:  # a bad flag, argument or command name below this group
            raise _one_line(e) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt as e:  # Ctrl-C, or a SIGTERM a command turned into a clean stop (Interrupted)
            signum = getattr(e, "signum", signal.SIGINT)
            click.echo(f"stopped by {signal.Signals(signum).name}", err=True)
            ctx.exit(128 + signum)  # what shells and schedulers expect of a process a signal stopped
        except Exception as e:
            if ctx.meta.get("tokformer.debug") or os.environ.get("TOKFORMER_DEBUG"):
                raise
            if isinstance(e, TokformerError):
                message, code = str(e), e.exit_code
            elif isinstance(e, OSError):  # a path the user named is wrong (2), or the system failed (1)
                message = f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
                code = 2 if isinstance(e, USER_PATH_ERRORS) else 1
            elif _out_of_memory(e):  # the sizes asked for passed every estimate, and still do not fit
                message, code = f"out of memory{f': {e}' if str(e) else ''}; ask for less (data, batch, model)", 1
            else:
                message, code = f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)", 1
            click.echo(f"Error: {' '.join(message.split())}", err=True)
            ctx.exit(code)


def _out_of_memory(error: Exception) -> bool:
    """A MemoryError, or torch's allocators saying the same: they raise RuntimeError (``[enforce fail at
    alloc_cpu.cpp] DefaultCPUAllocator: not enough memory``), or torch.OutOfMemoryError, a subclass of it,
    for CUDA and MPS (``CUDA out of memory``)."""
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and any(s in str(error) for s in ("DefaultCPUAllocator", "alloc_cpu",
                                                                          "out of memory")))


@click.group(cls=TokformerGroup, context_settings=CONTEXT)
@click.version_option(package_name="tokformer")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """tokformer: one Transformer for every modality."""
    ctx.meta["tokformer.debug"] = debug


def _is_rank0() -> bool:
    """Whether this process prints: rank 0 of a torchrun job (or the only process). Asked before any
    process group exists, so from torchrun's environment (read in one place, imported lazily)."""
    from tokformer.runtime.distributed import launch_env

    return launch_env()[0] == 0


def _metavar(tp: Any) -> str:
    """How --help shows a config field's value: INT, [layer|rms], INT|none, TEXT,..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "[" + "|".join(map(str, args)) + "]"
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            return "VALUE"
        shown = _metavar(inner[0])
        if type(None) not in args:
            return shown
        return shown[:-1] + "|none]" if shown.startswith("[") else f"{shown}|none"
    if origin in (list, tuple):
        return f"{_metavar(args[0]) if args else 'VALUE'},..."
    return {int: "INT", float: "FLOAT", str: "TEXT", bool: "[true|false]", Path: "PATH"}.get(tp, "VALUE")


def _shown(value: Any) -> str:
    """A default as a user would type it back: none, true, a,b, ""."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return str(value) if value != "" else '""'


def _spellings(kebab: str, is_flag: bool) -> set[str]:
    return {f"--{kebab}", f"--no-{kebab}"} if is_flag else {f"--{kebab}"}


def config_flags(cls: type, section: str, defaults: dict[str, Any], taken: set[str]) -> list[click.Option]:
    """One flag per field of the config dataclass ``cls``, documented from the field's help and default.

    The parameter is named ``SECTION__FIELD`` so the command knows which section it sets.
    Values stay strings, checked and coerced by the config layer, so a bad flag value gets
    the same message as a bad config-file value; the default stays None so that only flags
    the user typed override the config file and -o. A field whose flag is already ``taken``
    (a task option named like a train option) is spelled ``--SECTION-NAME`` instead, so that
    a train flag means the same for every task. ``taken`` grows by the flags made.
    """
    from tokformer.config import ARCHITECTURE, BlockOptions
    from tokformer.runtime.config import config_fields, field_default

    hints = typing.get_type_hints(cls)
    options = []
    shared = set(config_fields(BlockOptions)) if issubclass(cls, BlockOptions) else set()
    # the task's own options first (sizes, data), then the block switches every task shares
    for fld in sorted(config_fields(cls).values(), key=lambda f: f.name in shared):
        kebab = fld.name.replace("_", "-")
        is_flag = hints[fld.name] is bool
        if taken & _spellings(kebab, is_flag):
            kebab = f"{section}-{kebab}"
        taken |= _spellings(kebab, is_flag)
        default = defaults[fld.name] if fld.name in defaults else field_default(fld)
        help_ = f"{fld.metadata.get('help', '')}  [default: {_shown(default)}]"
        name = f"{section}__{fld.name}"
        if is_flag:
            option = click.Option([f"--{kebab}/--no-{kebab}", name], default=None, help=help_)
        else:
            option = click.Option([f"--{kebab}", name], default=None, metavar=_metavar(hints[fld.name]), help=help_)
        option.help_group = "model" if fld.metadata.get(ARCHITECTURE) else section  # --help's sections
        options.append(option)
    return options


def _option_names(params: list[click.Parameter]) -> set[str]:
    return {opt for p in params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


def _format_sections(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter,
                     task: str | None = None) -> None:
    """--help of `tokformer train [TASK]`: the task's options, then the train options, then the rest."""
    sections: dict[str, list[tuple[str, str]]] = {"task": [], "model": [], "train": [], "": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is not None:
            sections[getattr(param, "help_group", "")].append(record)
    titles = {"task": f"Data and task options ({task})", "model": f"Model options ({task}; fixed by --init-from)",
              "train": "Train options", "": "Options"}
    for section, records in sections.items():
        if records:
            with formatter.section(titles[section]):
                formatter.write_dl(records)


class TaskCommand(click.Command):
    """`tokformer train TASK`: one flag per field of the task's config dataclass, then one per
    TrainConfig field (with the task's ``train_defaults`` shown), then train's own options."""

    def __init__(self, name: str, task_cls: type, own: list[click.Parameter]) -> None:
        from tokformer.runtime.config import TrainConfig

        config = task_cls.Config
        taken = _option_names(own) | {"-h", "--help"}
        train_flags = config_flags(TrainConfig, "train", dict(task_cls.train_defaults), taken)
        doc = (task_cls.__doc__ or "").strip().splitlines()
        super().__init__(name, context_settings=CONTEXT, callback=self.run,
                         params=[*config_flags(config, "task", {}, taken), *train_flags, *own],
                         help=f"{doc[0] if doc else ''}\n\nPrecedence: defaults < --config < -o/--set < flags.")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_sections(self, ctx, formatter, self.name)

    @staticmethod
    def run(**values: Any) -> None:
        """Train with this command's values over those given to `tokformer train` before TASK."""
        ctx = click.get_current_context()
        parent = ctx.parent.params if ctx.parent is not None else {}
        merged = {**parent, **{key: value for key, value in values.items() if value is not None}}
        merged["sets"] = (*parent.get("sets", ()), *values["sets"])
        merged["overwrite"] = values["overwrite"] or parent.get("overwrite", False)
        merged["quiet"] = values["quiet"] or parent.get("quiet", False)
        implied = ctx.parent is not None and ctx.parent.meta.get(TrainGroup.IMPLIED)
        _train(None if implied else ctx.info_name, **merged)


class TrainGroup(TokformerGroup):
    """`tokformer train`: its commands are the registered tasks (plug-ins included), each built
    when named as a :class:`TaskCommand`. The group takes the train options and its own too, so
    `tokformer train -c FILE` and `tokformer train --resume RUN` need no TASK; an option it does
    not know goes to the command of the task they name (`tokformer train -c sort.toml --seq-len 5`).
    Flags are built when asked, not at import: `tokformer --help` loads neither engine nor torch.
    """

    IMPLIED = "tokformer.train.implied"  # ctx.meta key: the task came from --config or --resume, not TASK
    ignore_unknown_options = True  # kept for the task's command: see resolve_command
    _train_flags: list[click.Option] | None = None

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._train_flags is None:
            from tokformer.runtime.config import TrainConfig

            self._train_flags = config_flags(TrainConfig, "train", {}, _option_names(self.params) | {"-h", "--help"})
        help_option = self.get_help_option(ctx)
        return [*self._train_flags, *self.params, *([help_option] if help_option else [])]

    def list_commands(self, ctx: click.Context) -> list[str]:
        from tokformer.runtime.registry import task_names

        return task_names()

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from tokformer.runtime.registry import get_task

        try:
            return TaskCommand(name, get_task(name), self.params)
        except ConfigError:
            return None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str, click.Command, list[str]]:
        """TASK; else, for an option the group does not know (kept for the task's command), the task
        the --config file or the --resume'd run names."""
        from tokformer.runtime.config import load_config_file, split_sections
        from tokformer.runtime.registry import get_task
        from tokformer.store.run_dir import saved_config

        name, rest = args[0], args[1:]
        if name.startswith("-"):
            config_file, resume = ctx.params["config_file"], ctx.params["resume"]
            config = load_config_file(config_file) if config_file else saved_config(Path(resume)) if resume else {}
            name, rest = split_sections(config, "config")[0], args
            if not isinstance(name, str):
                option = args[0].partition("=")[0]
                error = click.NoSuchOption(option, possibilities=_option_names(self.get_params(ctx)), ctx=ctx)
                raise click.UsageError(f"{error.format_message()} If it is a task option, name the task first: "
                                       f"tokformer train TASK {option} ...", ctx)
            ctx.meta[self.IMPLIED] = True
        return name, TaskCommand(name, get_task(name), self.params), rest  # get_task: unknown -> known ones

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_sections(self, ctx, formatter)
        self.format_commands(ctx, formatter)


@main.group(cls=TrainGroup, context_settings=CONTEXT, invoke_without_command=True,
            subcommand_metavar="[TASK [TASK OPTIONS]...]")
@click.option("-c", "--config", "config_file", metavar="FILE",
              help="TOML, YAML or JSON config with [task] (name + task options) and [train] sections.")
@click.option("-o", "--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set any option by its config name: task or train options, e.g. -o seq_len=12 "
                   "-o train.lr=3e-4. Wins over --config.")
@click.option("--resume", metavar="RUN_DIR", help="Continue RUN_DIR from its latest checkpoint (exactly).")
@click.option("--overwrite", is_flag=True, help="Replace the run directory if it already exists.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or info lines (for CI and log files).")
@click.pass_context
def train(ctx: click.Context, **values: Any) -> None:
    """Train TASK (e.g. sort): `tokformer train TASK --help` lists its options, `tokformer tasks` the tasks.

    Name TASK before its options (or name it in the --config file); its options are flags like
    the train options (--d-model 128, --flip/--no-flip, --d-ff none). A task option named like a
    train option is spelled --task-NAME. Precedence: defaults < --config < -o/--set < flags. The
    resolved config is saved as RUN_DIR/config.json. Runs under `torchrun --nproc-per-node N` unchanged.
    """
    if ctx.invoked_subcommand is None:  # no TASK: the --config file's or the --resume'd run's
        _train(None, **values)


def _with_task(config: dict[str, Any], task: str) -> dict[str, Any]:
    section = config.get("task", {})
    section = {"name": section} if isinstance(section, str) else dict(section)
    return {**config, "task": {**section, "name": task}}


def _train(task: str | None, config_file: str | None, sets: tuple[str, ...], resume: str | None,
           overwrite: bool, quiet: bool, **flags: str | bool | None) -> None:
    """Train from `tokformer train`'s values: flags arrive as strings, coerced by the config layer."""
    from tokformer.engine import api
    from tokformer.engine.progress import configure_logging
    from tokformer.runtime.config import load_config_file, parse_override

    configure_logging(quiet or not _is_rank0())
    overrides: dict[str, Any] = dict(parse_override(s) for s in sets)
    overrides.update({name.replace("__", ".", 1): v for name, v in flags.items() if v is not None})
    if resume is not None:
        if task or config_file:
            raise ConfigError("--resume takes task and config from RUN_DIR/config.json; drop TASK and --config")
        result = api.train(resume=resume, overwrite=overwrite, quiet=quiet, **overrides)
    else:
        config: dict[str, Any] = load_config_file(config_file) if config_file else {}
        result = api.train(_with_task(config, task) if task else config, overwrite=overwrite, quiet=quiet,
                           **overrides)
    if not _is_rank0():
        return
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in result.metrics.items())
    if result.interrupted:
        click.echo(f"interrupted at step {result.step}; checkpoint saved. "
                   f"Resume with: tokformer train --resume {result.run_dir} (or rerun this command)")
        if result.signal is not None:  # what shells and schedulers expect of a process a signal stopped
            click.get_current_context().exit(128 + result.signal)
        return
    if result.report is not None:
        click.echo(result.report.table())
    early = (f"; stopped early at step {result.step}, best checkpoint step {result.best['step']}"
             if result.stopped_early and result.best else "")
    click.echo(f"done: {result.step} steps in {result.run_dir}{early}" + (f"; {metrics}" if metrics else ""))


@main.command("evaluate", context_settings=CONTEXT)
@click.argument("run_dir")
@click.option("--data", metavar="PATH", help="Evaluate on all of this data instead of the held-out split, given as "
              "the task's data option takes it (lm: text files or folder; translate: .tsv/.jsonl; classify: "
              "image folder; graph: folder or manifest).")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--device", type=DEVICE, default="auto", show_default=True, help="auto, cpu, cuda, cuda:N or mps.")
@click.option("--batch-size", type=POSITIVE, default=None,
              help="Evaluation batch size [default: the run's batch_size].")
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"data": ..., "metrics": {...}, "baselines": {BASELINE: {...}}}.')
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def evaluate_command(run_dir: str, data: str | None, checkpoint: str, device: str, batch_size: int | None,
                     as_json: bool, quiet: bool) -> None:
    """Evaluate a checkpoint of RUN_DIR, or a model folder (tokformer export), on its task's held-out split
    (or on --data): a table of each metric beside trivial baselines on the same data."""
    from tokformer.engine import api
    from tokformer.engine.progress import configure_logging

    configure_logging(quiet or not _is_rank0())
    result = api.evaluate(run_dir, data=data, checkpoint=checkpoint, device=device, batch_size=batch_size,
                          quiet=quiet)
    if not _is_rank0():
        return
    click.echo(json.dumps(result.as_dict()) if as_json else result.table())


@main.command(context_settings=CONTEXT)
@click.argument("run_dir")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--top-k", type=POSITIVE, default=None,
              help="classify, graph: how many classes to show per input [default: 5].")
@click.option("--prompt", type=TEXT, default=None, metavar="TEXT",
              help="vqa: the question asked about every image [default: none, the model describes it].")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or mps.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars, info lines or warnings.")
def predict(run_dir: str, inputs: tuple[str, ...], top_k: int | None, prompt: str | None, checkpoint: str,
            device: str, quiet: bool) -> None:
    """Run the model of RUN_DIR (or of a model folder) on INPUTS and print one line per input.

    INPUTS are what the task reads: sort: digits ("3 1 2" or 312); classify, vqa: image files;
    graph: graph files; lm: prompts; translate: sentences.
    """
    import inspect

    from tokformer.engine.progress import configure_logging
    from tokformer.store.loader import load

    configure_logging(quiet)
    predictor = load(run_dir, checkpoint, device)
    options = {name: value for name, value in (("top_k", top_k), ("prompt", prompt)) if value is not None}
    accepted = inspect.signature(predictor.task.predict).parameters
    if unknown := [name for name in options if name not in accepted]:
        raise click.UsageError(f"--{unknown[0].replace('_', '-')} does not apply to this model "
                               f"({type(predictor.task).__name__})")
    shown = [predictor.task.show_prediction(source, prediction)
             for source, prediction in zip(inputs, predictor(inputs, **options), strict=True)]
    several_lines = any("\n" in line for line in shown)  # continuations of prompts: mark where each one starts
    for i, line in enumerate(shown):
        click.echo(f"{chr(10) * bool(i)}--- input {i + 1} ---\n{line}" if several_lines and len(shown) > 1 else line)


@main.command(context_settings=CONTEXT)
@click.argument("run_dir")
@click.option("-p", "--prompt", "prompts", type=TEXT, multiple=True, metavar="TEXT",
              help="Text to continue (repeatable: prompts run as one batch) [default: one empty prompt].")
@click.option("-n", "--max-new-tokens", type=POSITIVE, default=128, show_default=True, help="Most tokens per prompt.")
@click.option("-t", "--temperature", type=FiniteRange(min=0.0), default=0.8, show_default=True,
              help="0 = greedy decoding.")
@click.option("--top-k", type=POSITIVE, default=None, help="Sample among the K most likely tokens only.")
@click.option("--top-p", type=FiniteRange(0.0, 1.0, min_open=True), default=None,
              help="Sample within the nucleus of probability mass P only.")
@click.option("--stop", "stops", type=TEXT, multiple=True, metavar="TEXT",
              help="End a continuation at this text (repeatable).")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Sampling seed.")
@click.option("--no-cache", is_flag=True, help="Recompute the whole sequence per token (slow; for checking).")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or mps.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars, info lines or warnings.")
def generate(run_dir: str, prompts: tuple[str, ...], max_new_tokens: int, temperature: float, top_k: int | None,
             top_p: float | None, stops: tuple[str, ...], seed: int, no_cache: bool, checkpoint: str,
             device: str, quiet: bool) -> None:
    """Continue text with the language model of RUN_DIR (a `tokformer train lm` run), a model folder
    (tokformer export) or a Hugging Face causal-LM folder.

    One prompt streams as it is generated; several are generated as a batch and printed
    in order. A prompt too long for the model's context is cut from the left (a warning says so).
    """
    import warnings

    from tokformer.tasks.lm import generate_text

    texts = list(prompts) or [""]
    stream = len(texts) == 1
    prompt_shown = False  # the streamed prompt is printed once the model has loaded, never before an error

    def show(_row: int, piece: str) -> None:
        nonlocal prompt_shown
        if not prompt_shown:
            prompt_shown = True
            click.echo(texts[0], nl=False)
        click.echo(piece, nl=False)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = generate_text(run_dir, texts, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, stop=stops, seed=seed, use_cache=not no_cache, checkpoint=checkpoint,
                                device=device,
                                on_text=show if stream else None)
    for warning in [] if quiet else caught:
        click.echo(f"Warning: {warning.message}", err=True)
    if stream:
        click.echo("" if prompt_shown else texts[0])
        return
    for i, (prompt, output) in enumerate(zip(texts, outputs, strict=True)):
        click.echo(f"{chr(10) * bool(i)}--- prompt {i + 1} ---\n{prompt}{output}")


@main.command("translate", context_settings=CONTEXT)
@click.argument("run_dir")
@click.argument("sentence", type=TEXT, required=False)
@click.option("--file", "in_file", metavar="FILE", help="Translate this UTF-8 file, one sentence per line.")
@click.option("-o", "--out", "out_file", metavar="FILE", help="With --file: write translations here [default: stdout].")
@click.option("--overwrite", is_flag=True, help="Replace --out's FILE if it exists (never the --file translated).")
@click.option("--eval", "held_out", is_flag=True, help="Score BLEU, chrF and exact match on the held-out split.")
# the bounds of beam_search.MAX_BEAM_SIZE and MAX_LENGTH_PENALTY (importing them here would load torch)
@click.option("--beam-size", type=click.IntRange(1, 1024), default=None,
              help="1 = greedy decoding [default: the run's, 4].")
@click.option("--length-penalty", type=FiniteRange(-10.0, 10.0), default=None,
              help="Beam length penalty alpha [default: the run's, 1.0].")
@click.option("--batch-size", type=POSITIVE, default=64, show_default=True, help="Sentences decoded together.")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or mps.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def translate_command(run_dir: str, sentence: str | None, in_file: str | None, out_file: str | None,
                      overwrite: bool, held_out: bool, beam_size: int | None, length_penalty: float | None,
                      batch_size: int, checkpoint: str, device: str, quiet: bool) -> None:
    """Translate SENTENCE (or --file, or the held-out split with --eval) with a `tokformer train translate` run
    or its model folder (tokformer export)."""
    from tokformer.engine.progress import progress
    from tokformer.tasks.translate import held_out_scores, load_translator, read_sentences, translate

    if (sentence is not None) + (in_file is not None) + held_out != 1:
        raise click.UsageError("give exactly one of SENTENCE, --file and --eval")
    if out_file is not None and in_file is None:
        raise click.UsageError("--out needs --file")
    if out_file is not None:  # before the model loads: a refusal costs nothing
        from tokformer.files import check_output_file

        check_output_file(out_file, overwrite=overwrite, inputs=[in_file])
    model = load_translator(run_dir, checkpoint, device)
    options = {"beam_size": beam_size, "length_penalty": length_penalty, "batch_size": batch_size}
    if sentence is not None:
        click.echo(translate(model, [sentence], **options)[0])
        return
    sources = model.task.pairs()[1] if held_out else read_sentences(in_file)
    with progress(not quiet, total=len(sources), desc="translate", unit="sent") as bar:
        if held_out:
            for name, value in held_out_scores(model, on_batch=bar.update, **options).items():
                click.echo(f"{name}: {value:.4g}")
            return
        try:
            outputs = translate(model, sources, on_batch=bar.update, **options)
        except DataError as e:  # "sentence N" is line N of the file (empty lines are refused above)
            raise DataError(f"{in_file}: {e}") from None
    text = "".join(line + "\n" for line in outputs)
    if out_file is None:
        click.echo(text, nl=False)
    else:
        from tokformer.atomic import write_text_atomic

        write_text_atomic(Path(out_file), text)  # an interrupted run never leaves a half-written file


@main.command(context_settings=CONTEXT)
@click.argument("run_dir")
@click.option("-o", "--out", required=True, metavar="DIR",
              help="The model folder to write (must not exist, or be empty).")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--format", "fmt", type=click.Choice(["folder", "onnx"]), default="folder", show_default=True,
              help="folder: config.json, model.safetensors and tokenizer files; onnx: the same plus model.onnx.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def export(run_dir: str, out: str, checkpoint: str, fmt: typing.Literal["folder", "onnx"], quiet: bool) -> None:
    """Write a checkpoint of RUN_DIR as a model folder: what generate, translate, predict, evaluate
    and tokformer.from_pretrained load, and what init_from fine-tunes."""
    from tokformer.interop.export import export_run

    folder = export_run(run_dir, out, checkpoint=checkpoint, format=fmt, show_progress=not quiet)
    which = f"the checkpoint of step {checkpoint}" if checkpoint.isdigit() else f"its {checkpoint} checkpoint"
    click.echo(f"exported {run_dir} ({which}) to {folder}")


@main.command(context_settings=CONTEXT)
@click.argument("name", required=False)
@click.option("-q", "--quiet", is_flag=True, help="No warnings (e.g. about a plug-in that failed to import).")
def tasks(name: str | None, quiet: bool) -> None:
    """List the registered tasks, or the options of task NAME with their defaults (as -o NAME=VALUE;
    `tokformer train NAME --help` shows them as flags)."""
    from tokformer.engine.progress import configure_logging
    from tokformer.runtime.config import config_fields, field_default
    from tokformer.runtime.registry import get_task, task_names

    configure_logging(quiet)
    if name is None:
        rows = [(task_name, ((get_task(task_name).__doc__ or "").strip().splitlines() or [""])[0])
                for task_name in task_names()]
    else:
        hints = typing.get_type_hints(get_task(name).Config)
        rows = [(fld.name, _metavar(hints[fld.name]), f"default {_shown(field_default(fld))}",
                 fld.metadata.get("help", "")) for fld in config_fields(get_task(name).Config).values()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)] if rows else []
    for row in rows:  # columns as wide as their longest entry, so long types do not push the rest out of line
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))


@main.group(context_settings=CONTEXT)
def tokenizer() -> None:
    """Train a byte-level BPE tokenizer, encode text to ids and decode ids to text."""


@tokenizer.command("train", context_settings=CONTEXT)
@click.option("--data", "data", multiple=True, required=True, metavar="FILE", help="UTF-8 text file (repeatable).")
@click.option("--vocab-size", type=POSITIVE, required=True, help="Vocabulary size, specials and 256 bytes included.")
@click.option("-o", "--out", required=True, metavar="DIR", help="Directory to save the tokenizer to.")
@click.option("--pattern", type=TEXT, default="gpt2", show_default=True,
              help="Pre-tokenization: gpt2, cl100k or a regex.")
@click.option("--min-frequency", type=int, default=0, show_default=True, help="Stop below this pair count.")
@click.option("--special-token", "special_tokens", type=TEXT, multiple=True, metavar="TOKEN",
              help="Special token (repeatable) [default: <|endoftext|>, which `train lm` needs between documents].")
@click.option("--no-special-tokens", is_flag=True, help="No special tokens at all (not even <|endoftext|>).")
@click.option("--overwrite", is_flag=True, help="Replace the tokenizer already saved in --out.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def tokenizer_train(data: tuple[str, ...], vocab_size: int, out: str, pattern: str, min_frequency: int,
                    special_tokens: tuple[str, ...], no_special_tokens: bool, overwrite: bool, quiet: bool) -> None:
    """Train a byte-level BPE on the --data files and save it to --out (new or empty)."""
    from tokformer.atomic import staged_folder
    from tokformer.store.lock import hold
    from tokformer.tokenizers.commands import check_out, train_tokenizer

    if no_special_tokens and special_tokens:
        raise click.UsageError("--no-special-tokens and --special-token contradict each other; give one")
    special_tokens = () if no_special_tokens else special_tokens or ("<|endoftext|>",)

    folder = Path(out)
    with hold(folder, "tokformer tokenizer train"):
        check_out(folder, overwrite)  # before the training
        with staged_folder(folder, replace=overwrite) as tmp:  # the folder appears whole or not at all
            trained = train_tokenizer(data, vocab_size, tmp, pattern=pattern, min_frequency=min_frequency,
                                      special_tokens=special_tokens, show_progress=not quiet)
            check_out(folder, overwrite)  # again: what --overwrite replaces must still be a tokenizer
    click.echo(f"saved a {trained.vocab_size}-token BPE ({len(trained.merges)} merges) to {out}")


@tokenizer.command("encode", context_settings=CONTEXT)
@click.option("--tokenizer", "directory", required=True, metavar="DIR", help="A saved tokenizer directory.")
@click.argument("text", type=TEXT, required=False)
@click.option("--file", "file", metavar="FILE", help="Encode this UTF-8 file instead of TEXT.")
@click.option("--allow-special", is_flag=True, help="Treat special-token strings in the input as special tokens.")
@click.option("--backend", type=click.Choice(["auto", "python", "riptoken", "tiktoken"]), default="auto",
              show_default=True, help="Who encodes: auto takes the first compiled library that gives exactly the "
              "Python encoder's ids; a library named here must, or the command says why not.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def tokenizer_encode(directory: str, text: str | None, file: str | None, allow_special: bool, backend: str,
                     quiet: bool) -> None:
    """Print the token ids of TEXT (or of --file), space-separated."""
    from tokformer.tokenizers.commands import encode_text, read_text_file

    if (text is None) == (file is None):
        raise click.UsageError("give exactly one of TEXT and --file")
    source = read_text_file(file) if file is not None else text
    ids = encode_text(directory, source, allow_special=allow_special, show_progress=not quiet, backend=backend)
    click.echo(" ".join(map(str, ids)))


@tokenizer.command("decode", context_settings=CONTEXT)
@click.option("--tokenizer", "directory", required=True, metavar="DIR", help="A saved tokenizer directory.")
@click.argument("ids", nargs=-1)
@click.option("--no-newline", is_flag=True, help="Print the decoded text exactly, without a newline after it.")
@click.option("-q", "--quiet", is_flag=True, help="No info lines (decoding prints none; accepted like everywhere).")
def tokenizer_decode(directory: str, ids: tuple[str, ...], no_newline: bool, quiet: bool) -> None:
    """Print the text of token IDS (arguments, or whitespace-separated on stdin), and a newline."""
    from tokformer.tokenizers.commands import decode_ids, parse_ids

    words = ids or click.open_file("-").read().split()
    click.echo(decode_ids(directory, parse_ids(words)), nl=not no_newline)


@main.group(context_settings=CONTEXT)
def data() -> None:
    """Prepare data ahead of training: tokenized once, streamed by every run."""


@data.group("prepare", context_settings=CONTEXT)
def data_prepare() -> None:
    """Tokenize a corpus into the files a task trains on."""


@data_prepare.command("lm", context_settings=CONTEXT)
@click.option("--data", "source", required=True, metavar="DATA",
              help="Text to tokenize: comma-separated files, folders (recursive) and globs, one document per file; "
                   "or stdlib.")
@click.option("-o", "--out", required=True, metavar="DIR", help="The shards directory to write (new, empty, or older "
              "shards with --overwrite); train on it with `tokformer train lm --data DIR`.")
@click.option("--tokenizer", metavar="DIR", default=None,
              help="A saved BPE tokenizer with <|endoftext|> to reuse [default: train one on the data, as lm does].")
@click.option("--vocab-size", type=POSITIVE, default=None,
              help="BPE vocabulary when training the tokenizer [default: the lm task's vocab_size].")
@click.option("--tokenizer-chars", type=POSITIVE, default=None,
              help="Characters of the corpus the BPE trains on [default: the lm task's tokenizer_chars].")
@click.option("--data-seed", type=int, default=None,
              help="Seed of the document order [default: the lm task's data_seed].")
@click.option("--shard-tokens", type=POSITIVE, default=None, help="Tokens per shard file [default: 100000000].")
@click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=None,
              help="Tokenizing processes [default: every core].")
@click.option("--overwrite", is_flag=True, help="Replace the shards already in --out.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or info lines.")
def data_prepare_lm(source: str, out: str, tokenizer: str | None, vocab_size: int | None,
                    tokenizer_chars: int | None, data_seed: int | None, shard_tokens: int | None,
                    workers: int | None, overwrite: bool, quiet: bool) -> None:
    """Tokenize text once, on every core, into fixed-size memory-mapped shards with an index, for
    corpora bigger than memory (docs/lm.md, "Corpora bigger than memory")."""
    from tokformer.engine.progress import configure_logging
    from tokformer.tasks.lm_shards import prepare_lm

    configure_logging(quiet)
    given = {"tokenizer": tokenizer, "vocab_size": vocab_size, "tokenizer_chars": tokenizer_chars,
             "data_seed": data_seed, "shard_tokens": shard_tokens, "workers": workers}
    index = prepare_lm(source, out, overwrite=overwrite, show_progress=not quiet,
                       **{k: v for k, v in given.items() if v is not None})
    click.echo(f"wrote {index.tokens} tokens of {index.documents} documents in {len(index.shards)} shard(s) to {out}")


@main.group(context_settings=CONTEXT)
def vqa() -> None:
    """Look inside a vqa model (`tokformer train vqa`)."""


@vqa.command("attention", context_settings=CONTEXT)
@click.argument("run_dir")
@click.argument("image")
@click.argument("questions", type=TEXT, nargs=-1, required=True)
@click.option("-o", "--out", default="attention.png", show_default=True, metavar="FILE", help="The figure (PNG).")
@click.option("--layer", type=int, default=-1, show_default=True, help="Which block's attention (-1: the last).")
@click.option("--overwrite", is_flag=True, help="Replace FILE if it exists.")
@click.option("--checkpoint", default="best", show_default=True, help="best, latest, or a step number.")
@click.option("--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or mps.")
@click.option("-q", "--quiet", is_flag=True, help="No info lines or warnings.")
def vqa_attention(run_dir: str, image: str, questions: tuple[str, ...], out: str, layer: int, overwrite: bool,
                  checkpoint: str, device: str, quiet: bool) -> None:
    """Where the answer looks: for each of QUESTIONS about IMAGE, the model's answer and the attention
    of its first token over the picture, one panel per question."""
    from tokformer.engine.progress import configure_logging
    from tokformer.tasks.vqa_attention import attention_figure

    configure_logging(quiet)
    path = attention_figure(run_dir, image, questions, out, layer=layer, overwrite=overwrite, checkpoint=checkpoint,
                            device=device)
    click.echo(f"wrote {path}")


def _seed_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    from tokformer.runtime.config import coerce

    try:
        return None if value is None else coerce(value, tuple[int, ...], "--seeds")
    except ConfigError:
        raise click.BadParameter(f"expected comma-separated integers like 0,1,2, got {value!r}") from None


def _model_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``a,b`` -> ("a", "b"), each a birds model name, or a one-line error naming the accepted forms."""
    if value is None:
        return None
    from tokformer.tasks.birds.models import parse_spec

    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if not names:
        raise click.BadParameter("expected comma-separated model names like pool-d5,transformer-local-l2")
    for name in names:
        try:
            parse_spec(name)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None
    return names


@main.command(context_settings=CONTEXT)
@click.option("-o", "--out", default="birds_report", show_default=True, metavar="DIR", help="Report directory.")
@click.option("--quick", is_flag=True, help="The small sweep (under 10 minutes on 2 CPU cores).")
@click.option("--seeds", callback=_seed_list, metavar="0,1,2", help="Seeds [default: quick 0; full 0,1,2].")
@click.option("--models", callback=_model_list, metavar="NAME,NAME",
              help="Only these models, e.g. transformer-local-l2-lpos,pool-d5 [default: the preset's; "
              "`tokformer tasks birds` lists the forms].")
@click.option("--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or mps.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or per-run lines.")
def birds(out: str, quick: bool, seeds: tuple[int, ...] | None, models: tuple[str, ...] | None, device: str,
          quiet: bool) -> None:
    """CNNs vs a Transformer on counting birds vs comparing two far-apart birds; writes a report."""
    from tokformer.engine.progress import configure_logging
    from tokformer.tasks.birds import run_experiment
    from tokformer.tasks.birds.experiment import SweepInterrupted

    configure_logging(quiet)
    try:
        report = run_experiment(out, quick=quick, seeds=seeds, models=models, device=device, quiet=quiet)
    except SweepInterrupted as stop:
        click.echo(f"interrupted: {stop}", err=True)
        click.get_current_context().exit(128 + (stop.signal or 2))
    click.echo(f"report: {report}")


if __name__ == "__main__":
    main()
