"""One writer per directory: an advisory lock held while a command writes a run or an output folder.

Two ``tokformer train`` commands on one run directory would interleave its metrics and
checkpoints, and one could delete the other's directory; the same goes for two exports or
two ``data prepare`` runs into one folder. Each such command holds ``PARENT/.NAME.lock``
(a sibling, so it also guards a directory that is about to be created or replaced) with
``fcntl.flock``: the kernel drops it when the holder exits, however it exits, so a lock is
never stale (worker processes forked while it is held share it; they die with their parent,
see ``tasks/lm_shards.py``). Unlike a POSIX record lock it also holds between two threads of
one process. The file records the holder (pid, host, command, start) for the refusal message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from tokformer import files
from tokformer.errors import ConfigError


def lock_file(directory: Path) -> Path:
    directory = Path(directory).absolute()
    return directory.parent / f".{directory.name}.lock"


@contextlib.contextmanager
def hold(directory: str | os.PathLike, command: str) -> Iterator[None]:
    """Hold the lock of ``directory`` for the block, or raise a one-line ConfigError naming the
    process that holds it."""
    path = lock_file(Path(directory))
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"{directory} is in use by {_holder(path)}; wait for it to finish, stop it, "
                              "or choose another directory") from None
        if _same_file(fd, path):  # not unlinked by a holder that released it while we opened it
            break
        os.close(fd)
    try:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(record).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)  # closing releases the lock


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _holder(path: Path) -> str:
    """The holder a lock file records, for the message (best effort: it may be mid-write)."""
    try:
        record = files.loads(path.read_text(encoding="utf-8"))
        return (f"{record['command']} (pid {record['pid']} on {record['host']}, since {record['since']})"
                if isinstance(record, dict) else "another process")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
