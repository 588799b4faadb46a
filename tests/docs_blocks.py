"""Reading the fenced code blocks of README.md and docs/*.md, and the budget they run under.

Every ``bash``, ``python``, ``toml`` and ``json`` block is run by ``tests/test_docs.py``
unless an HTML comment directly above its fence says otherwise (invisible on GitHub):

- ``<!-- docs: not run: REASON -->``: it cannot run here (several GPUs or nodes, a network
  download, a benchmark that must run alone); the reason is required.
- ``<!-- docs: tested by tests/test_x.py -->``: another test executes it from the document.
- ``<!-- docs: file NAME -->``: the block is a file the following blocks use (a config, a
  module); it is written to NAME in the document's sandbox.
- ``<!-- docs: skip line N: REASON -->``: one line (1-based, in the block) that cannot run here.
- ``<!-- docs: continues -->``: a ``python`` block that goes on from the one above it (its
  names); every other ``python`` block starts in a fresh interpreter, as a reader pasting it would.
- ``<!-- docs: setup COMMAND -->``: a shell command run first, for what the prose around the
  block assumes exists (a trained translation model folder), budgeted like the blocks.

Blocks of one document run in order in one sandbox directory (``bash`` as scripts, ``python``
each in a fresh interpreter unless it continues the one above); other languages
(``text``, diagrams, outputs) are not code.

Training commands run under a small budget (:data:`BUDGET`, :func:`budgeted`): a few steps on
small built-in data, so every documented command is exercised end to end in minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = ("bash", "python", "toml", "json")
DIRECTIVE = re.compile(r"^<!--\s*docs:\s*(?P<body>.*?)\s*-->\s*$")

#: Every training command and ``train()`` call gets these (a later flag wins in click).
BUDGET = {"steps": 2, "eval_every": 2, "warmup_steps": 0, "batch_size": 8}
#: Per task, small data: built-in data made small, and an lm held-out split that holds a window
#: of the sandbox's small corpora (flags, so that they win over the document's own).
SMALL_DATA = {
    "classify": {"train_size": 64, "eval_size": 16},
    "translate": {"train_size": 300, "eval_size": 12, "bpe_sample": 300, "vocab_size": 300},
    "lm": {"stdlib_bytes": 60_000, "tokenizer_chars": 30_000, "vocab_size": 300, "val_fraction": 0.2,
           "context_len": 32},
    "graph": {"per_class": 5},
    "vqa": {"train_size": 64, "eval_size": 16},
    "audio": {"train_size": 48, "eval_size": 12},
}


@dataclass
class Block:
    """One fenced block: where it is, its language, its lines and the directives above it."""

    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    lines: list[str]
    not_run: str | None = None
    tested_by: str | None = None
    file: str | None = None
    skip_lines: dict[int, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    continues: bool = False

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def code(self) -> str:
        return "\n".join(line for i, line in enumerate(self.lines, 1) if i not in self.skip_lines) + "\n"


def read_blocks(document: Path) -> list[Block]:
    """Every fenced block of ``document`` with the directives in the comment lines above it."""
    text = document.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(text):
        opening = re.match(r"^\s*```(\S*)", text[i])
        if not opening:
            i += 1
            continue
        indent = len(text[i]) - len(text[i].lstrip())
        end = next(j for j in range(i + 1, len(text)) if re.match(r"^\s*```\s*$", text[j]))
        block = Block(document, i + 1, opening.group(1), [line[indent:] for line in text[i + 1:end]])
        above = i - 1
        while above >= 0 and (found := DIRECTIVE.match(text[above].strip())):
            _apply(block, found.group("body"))
            above -= 1
        blocks.append(block)
        i = end + 1
    return blocks


def _apply(block: Block, body: str) -> None:
    if (m := re.fullmatch(r"not run:\s*(.+)", body)):
        block.not_run = m.group(1)
    elif (m := re.fullmatch(r"tested by\s+(\S+)", body)):
        block.tested_by = m.group(1)
    elif (m := re.fullmatch(r"file\s+(\S+)", body)):
        block.file = m.group(1)
    elif (m := re.fullmatch(r"skip line\s+(\d+):\s*(.+)", body)):
        block.skip_lines[int(m.group(1))] = m.group(2)
    elif body == "continues":
        block.continues = True
    elif (m := re.fullmatch(r"setup\s+(.+)", body)):
        block.setup.insert(0, m.group(1))  # directives are read bottom-up: keep their written order
    else:
        raise ValueError(f"{block.id}: unknown docs directive {body!r}")


def commands(code: str) -> list[str]:
    """The logical lines of a shell block: ``\\``-continued lines joined, blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def split_comment(line: str) -> tuple[str, str]:
    """``(command, comment)``: the first ``#`` outside quotes that follows a space starts the comment."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and i > 0 and line[i - 1].isspace():
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


TRAIN_COMMAND = re.compile(r"(?:^|\s)(?:tokformer|-m\s+tokformer\.cli)\s+train\b(?P<rest>.*)$")


def budgeted(line: str) -> str:
    """A shell line with :data:`BUDGET` (and its task's small data) appended to each ``tokformer train``
    command in it (commands joined by ``&&``, ``||`` or ``;`` each get their own)."""
    command, comment = split_comment(line)
    parts = re.split(r"(\s*(?:&&|\|\||;)\s*)", command)
    command = "".join(part if i % 2 else _budgeted_command(part) for i, part in enumerate(parts))
    return command + (f"  {comment}" if comment else "")


def _budgeted_command(command: str) -> str:
    found = TRAIN_COMMAND.search(command)
    if not found or "--help" in found.group("rest"):
        return command
    task = re.match(r"\s+([a-z_]+)\b", found.group("rest"))
    small = SMALL_DATA.get(task.group(1), {}) if task and "--resume" not in command else {}
    return " ".join([command, *(f"--{key.replace('_', '-')} {value}" for key, value in {**BUDGET, **small}.items())])


def small_train_overrides(config: object, overrides: dict) -> dict:
    """The keyword arguments a documented ``train(config, **overrides)`` call runs with."""
    extra = dict(BUDGET)
    if isinstance(config, str) and config in SMALL_DATA and "resume" not in overrides:
        extra.update(SMALL_DATA[config])
    return {**overrides, **extra}
