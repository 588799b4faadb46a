"""Writes that a crash cannot leave half done: a file or a folder appears whole or not at all.

Everything tokformer writes to disk goes through here: a file is written under a temporary
name in the same directory, fsynced and renamed over the target; a folder is assembled as a
temporary sibling, fsynced and renamed into place last. ``os.replace`` is atomic within one
file system, so a reader (or a resumed run) sees the old version or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tokformer.signals import held_back


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below ``root`` (and ``root``): before a staged folder is renamed
    into place, so the rename never publishes files whose bytes are still in the page cache."""
    for directory, _, names in os.walk(root, topdown=False):
        for name in names:
            fsync_file(Path(directory) / name)
        fsync_dir(Path(directory))


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Have ``write`` fill a new temporary file beside ``path`` (named after it, same suffix), then
    fsync it and rename it over ``path``: a crash leaves the old file or the new one, never half of
    one, and no file of the user's is taken for the temporary one. The file gets the permissions a
    plain write would give it (``mkstemp`` and safetensors make owner-only ones)."""
    tmp = None
    try:
        with held_back():  # a stop between making the temporary and keeping its name would leave it behind
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
            tmp = Path(name)
            os.close(fd)
        write(tmp)
        usual_permissions(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
            if isinstance(e, OSError) and e.filename is not None and os.fspath(e.filename) == name:
                # a full disk, a folder at ``path``: name the user's file, not the temporary one just deleted
                raise type(e)(e.errno, e.strerror, str(path)) from e
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`write_atomic`)."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2))


def shareable(folder: Path) -> None:
    """Give ``folder`` and its files the user's usual permissions: ``mkdtemp`` and safetensors create
    owner-only ones, and a folder that leaves tokformer (a model folder, shards) is meant to be handed on."""
    for directory, _, names in os.walk(folder):
        usual_permissions(Path(directory))
        for name in names:
            usual_permissions(Path(directory) / name)


def usual_permissions(path: Path) -> None:
    """Give ``path`` the permissions a plain ``open(..., "w")`` or ``mkdir`` would: ``mkstemp``, ``mkdtemp``
    and safetensors make owner-only ones, which other users of a shared folder cannot read."""
    umask = os.umask(0)  # reading the umask means setting it: set back at once
    os.umask(umask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


STAGING = ".tmp-"  # a folder being built for PARENT/NAME is PARENT/.NAME.tmp-XXXXXXXX (mkdtemp's 8 characters)
OLD = ".old-"  # the folder a replacement moves out of the way, PARENT/.NAME.old-XXXXXXXX, until the new one stands


def hidden_siblings(path: Path, marker: str, stamp: str) -> list[Path]:
    """The hidden siblings ``PARENT/.NAME{marker}{stamp}`` tokformer made for ``path``, sorted by name
    (``stamp`` is a regular expression). Matched by their whole name, not by a glob: a ``path`` named
    ``m[12]`` or ``m*`` as a pattern, or ``a`` as a prefix of ``a.tmp-x``, would otherwise take another
    folder's copy for its own, and delete it or move it in."""
    own = re.compile(re.escape(f".{path.name}{marker}") + stamp)
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir() if own.fullmatch(p.name))


def staging_folders(out: Path) -> list[Path]:
    """The temporary folders :func:`staged_folder` made for ``out`` (left by a build that was killed)."""
    return hidden_siblings(out, STAGING, r"[a-z0-9_]{8}")


def replaced_folders(out: Path) -> list[Path]:
    """The older folders :func:`staged_folder` moved aside to replace ``out`` (left by one that was killed)."""
    return hidden_siblings(out, OLD, r"[a-z0-9_]{8}")


def recover_replaced(out: Path) -> None:
    """Finish a replacement (:func:`staged_folder` with ``replace``) that was killed: killed between its two
    renames, ``out`` is missing and the older folder comes back; killed after them, the new ``out`` stands
    and the older one goes. Call it holding ``out``'s lock (:func:`tokformer.store.lock.hold` does): no
    replacement of ``out`` is running then."""
    for older in replaced_folders(out):
        if out.exists():
            _discard(older, out)
        else:
            os.replace(older, out)


def _discard(older: Path, out: Path) -> None:
    """Delete the folder ``out`` replaced. It is renamed to a staging name first, so a kill while it is being
    deleted leaves half of it only under a name the next holder of the lock clears, never as ``.old-``
    (which :func:`recover_replaced` would bring back)."""
    trash = None
    try:
        with held_back():
            trash = _new_sibling(out, STAGING)
            os.replace(older, trash)  # onto the empty folder mkdtemp made
    finally:
        if trash is not None:
            shutil.rmtree(trash)


def _new_sibling(out: Path, marker: str) -> Path:
    """A new, empty, owner-only folder ``PARENT/.NAME{marker}XXXXXXXX``: a name no other folder holds, so
    nothing of the user's is ever taken for it. Call it :func:`~tokformer.signals.held_back`, so that a stop
    cannot come between making the folder and keeping its name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}{marker}"))


@contextlib.contextmanager
def staged_folder(out: Path, replace: bool = False) -> Iterator[Path]:
    """Build a new folder ``out`` whole or not at all.

    Yields an empty temporary sibling (``.NAME.tmp-XXXX``) to fill; when the block ends without
    an error, every file in it is fsynced, it gets the user's usual permissions, and it is
    renamed to ``out`` (which may exist only as an empty directory). An error or an interrupt
    removes the temporary folder and leaves ``out`` as it was. The caller checks ``out`` is
    free first, so it can refuse before any work is done. With ``replace``, ``out`` may also be
    an older folder the caller checked holds only what tokformer wrote: it is moved to
    ``.NAME.old-XXXX``, the new one renamed in, and then it is deleted. An error or an interrupt
    between the two renames brings it back; a kill there leaves it for :func:`recover_replaced`.
    """
    if out.is_symlink():  # the folder a link names is the one to build or replace; the link stays, leading to it
        out = Path(os.path.realpath(out))
    tmp = older = None
    try:
        with held_back():
            tmp = _new_sibling(out, STAGING)
        yield tmp
        shareable(tmp)
        fsync_tree(tmp)
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        if replace and out.is_dir():
            with held_back():
                older = _new_sibling(out, OLD)
            os.replace(out, older)  # onto the empty folder mkdtemp made
        os.replace(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if older is not None:
            recover_replaced(out)  # the older folder back in place, or gone if the new one stands
        raise
    if older is not None:
        _discard(older, out)
