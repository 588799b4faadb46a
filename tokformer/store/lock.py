"""One writer per directory: an advisory lock held while a command writes a run or an output folder.

Two ``tokformer train`` commands on one run directory would interleave its metrics and
checkpoints, and one could delete the other's directory; the same goes for two exports or
two ``data prepare`` runs into one folder. Each such command holds ``PARENT/.NAME.lock``
(a sibling, so it also guards a directory that is about to be created or replaced) with
``fcntl.flock``: the kernel drops it when the holder exits, however it exits, so a lock is
never stale (worker processes forked while it is held share it; they die with their parent,
see ``tasks/lm_shards.py``). Unlike a POSIX record lock it also holds between two threads of
one process. The file records the holder (pid, host, command, start) for the refusal message.
Taking the lock also removes the staging folders (:func:`tokformer.atomic.staged_folder`)
a killed holder left and finishes a replacement it was killed in (:func:`tokformer.atomic.recover_replaced`):
while the lock is held, no build of the folder can be running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from tokformer import files
from tokformer.atomic import recover_replaced, staging_folders
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
    not_ours = ConfigError(f"{path} is not a tokformer lock file, but tokformer guards {directory} with that "
                           "name: move it away, or choose another directory")
    while True:
        try:  # O_NONBLOCK: a FIFO of the user's by that name must not block the open
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)  # nor a link be followed
        except IsADirectoryError:
            raise not_ours from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, socket or device: never truncated or deleted
            os.close(fd)
            raise not_ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"{directory} is in use by {_holder(path)}; wait for it to finish, stop it, "
                              "or choose another directory") from None
        if _same_file(fd, path):  # not unlinked by a holder that released it while we opened it
            break
        os.close(fd)
    if not _is_lock_record(fd):  # a file of the user's by that name: never truncated or deleted
        os.close(fd)
        raise not_ours
    guarded = Path(directory).absolute()
    for stale in staging_folders(guarded):  # a killed holder's; only a holder knows
        shutil.rmtree(stale, ignore_errors=True)  # that they are no running build's
    recover_replaced(guarded)
    try:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}  # the keys of RECORD
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


RECORD = ("pid", "host", "command", "since")  # what a holder writes into its lock file
MAX_RECORD_BYTES = 4096  # a record is under 300 bytes


def _is_lock_record(fd: int) -> bool:
    """Whether the file open at ``fd`` is empty (just made, or its holder died before writing) or
    holds a record a tokformer holder wrote: only then may it be overwritten and removed."""
    size = os.fstat(fd).st_size
    if size == 0:
        return True
    if size > MAX_RECORD_BYTES:
        return False
    try:
        record = files.loads(os.pread(fd, size, 0).decode("utf-8"))
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return False
    return isinstance(record, dict) and set(record) == set(RECORD)


def _holder(path: Path) -> str:
    """The holder a lock file records, for the message (best effort: it may be mid-write)."""
    try:
        record = files.loads(path.read_text(encoding="utf-8"))
        return f"{record['command']} (pid {record['pid']} on {record['host']}, since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):  # TypeError: JSON that is no object ([1], "x", 3)
        return "another process"
