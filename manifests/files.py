"""Ready-made tools: list and read files under one folder, and nothing outside it.

    export TOOLBRIDGE_FILES_ROOT=/srv/shared/reports
    toolbridge run "summarise the latest report" --tools manifests/files.py

Tools: `list_files`, `read_file`. Paths are relative to the root; absolute paths, `..` that
climbs out, and symbolic links that lead outside the root are refused, as are binary files,
FIFOs, sockets and devices. The root is read from `TOOLBRIDGE_FILES_ROOT` at each call.

Why descriptors: a path checked as a string and opened later can be redirected in between
(a folder swapped for a symbolic link to `/`). Here every path is walked one component at a
time from a descriptor of the root, each component opened relative to its parent's descriptor
with `O_NOFOLLOW`, so what was checked is what is read. Symbolic links inside the root are
followed by the same walk (their target is walked again from the root, at most
`MAX_LINK_HOPS` links per path); a link whose target leaves the root is refused. FIFOs are
never opened (and a file opened is opened with `O_NONBLOCK`, then checked with `fstat`), so
no path makes a call hang. Hard links are ordinary files of the folder: whoever can write
inside the root can link a file in, and that is not a path the walk can see. POSIX only
(`O_NOFOLLOW` and `dir_fd`).
"""

from __future__ import annotations

import codecs
import errno
import fnmatch
import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bridge.tools import manifest

__all__ = ["ROOT_ENV", "list_files", "read_file"]

ROOT_ENV = "TOOLBRIDGE_FILES_ROOT"
MAX_ENTRIES = 500
MAX_CHARS = 100_000
MAX_LINK_HOPS = 40  # as Linux's own MAXSYMLINKS: a loop of links ends with a clear error
MAX_SCANNED = 100_000  # entries looked at by one listing, so a huge tree cannot stall a call
MAX_DEPTH = 64  # folders below this depth are listed but not entered

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the type check must not block the open.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_LINK_ERRNOS = frozenset((errno.ELOOP, errno.EMLINK, errno.ENOTDIR))  # FreeBSD says EMLINK


@dataclass
class _Root:
    fd: int
    prefixes: tuple[tuple[str, ...], ...]  # the root as absolute links may spell it


@dataclass
class _Found:
    parts: list[str]  # the real path below the root, links resolved
    mode: int  # st_mode of what was found (never a link)
    size: int
    fd: int | None  # owned by the caller; None for FIFOs, sockets and devices


class _RefusedError(Exception):
    """A path that resolves outside the root (`how` says why) or not at all."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def _open_root() -> _Root:
    value = os.environ.get(ROOT_ENV)
    if not value:
        raise PermissionError(
            f"{ROOT_ENV} is not set: set it to the folder these tools may read, where "
            "toolbridge runs"
        )
    path = os.path.abspath(os.path.expanduser(value))
    try:
        # The root itself may be a link: the operator chose it. Only what is below is walked.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise FileNotFoundError(f"{ROOT_ENV} points to {value!r}, which is not a folder") from None
    prefixes = {_split_abs(path), _split_abs(os.path.realpath(path))}
    return _Root(fd=fd, prefixes=tuple(prefixes))


def _split_abs(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part not in ("", "."))


def _parts(path: str) -> list[str]:
    """The components of a user's path; refuses empty, NUL and absolute paths."""
    if not path.strip() or "\x00" in path:
        raise ValueError(f"path: expected a path relative to the shared folder (got {path!r})")
    text = path.strip()
    if text.startswith("/"):
        raise PermissionError(
            f"refused: {path!r} is an absolute path; use a path relative to the shared folder"
        )
    return [part for part in text.split("/") if part not in ("", ".")]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


_SPECIAL = {
    "fifo": "a FIFO (named pipe)",
    "socket": "a socket",
    "device": "a device",
    "other": "not a regular file",
}


def _resolve(root: _Root, parts: list[str], *, open_final: bool = True) -> _Found:
    """Walk `parts` below the root by descriptors; links inside the root are walked too.

    Raises:
        _RefusedError: The walk leaves the root, meets a link loop, or finds nothing.
    """
    pending: deque[tuple[str, bool]] = deque((part, False) for part in parts)
    stack: list[tuple[str, int]] = []  # the folders entered below the root, with descriptors
    hops = 0
    try:
        while pending:
            part, from_link = pending.popleft()
            parent = stack[-1][1] if stack else root.fd
            if part in ("", "."):
                continue
            if part == "..":
                if not stack:
                    raise _RefusedError("a symbolic link leads" if from_link else "it climbs")
                os.close(stack.pop()[1])
                continue
            try:
                info = os.stat(part, dir_fd=parent, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                raise _RefusedError("missing") from None
            if stat.S_ISLNK(info.st_mode):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise _RefusedError("loop")
                try:
                    target = os.readlink(part, dir_fd=parent)
                except OSError:  # swapped back for something else meanwhile: look again
                    pending.appendleft((part, from_link))
                    continue
                if target.startswith("/"):
                    below = _below_root(root, target)
                    if below is None:
                        raise _RefusedError("a symbolic link leads")
                    for _, fd in stack:
                        os.close(fd)
                    stack.clear()
                    new = below
                else:
                    new = target.split("/")
                pending.extendleft((piece, True) for piece in reversed(new))
                continue
            if not pending:
                return _final([*_names(stack), part], info, parent, part, open_final)
            if not stat.S_ISDIR(info.st_mode):
                raise _RefusedError("missing")
            try:
                stack.append((part, os.open(part, _DIR_FLAGS, dir_fd=parent)))
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise _RefusedError("missing") from None
                if exc.errno not in _LINK_ERRNOS:
                    raise
                # Swapped for a link (or a file) since the stat: look again, within the bound.
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise _RefusedError("loop") from None
                pending.appendleft((part, from_link))
        # Nothing left to walk: the path names a folder already entered (or the root).
        fd = os.dup(stack[-1][1] if stack else root.fd)
        info = os.fstat(fd)
        if not open_final:
            os.close(fd)
            return _Found(parts=_names(stack), mode=info.st_mode, size=0, fd=None)
        return _Found(parts=_names(stack), mode=info.st_mode, size=0, fd=fd)
    finally:
        for _, fd in stack:
            os.close(fd)


def _names(stack: list[tuple[str, int]]) -> list[str]:
    return [name for name, _ in stack]


def _final(
    parts: list[str], info: os.stat_result, parent: int, name: str, open_final: bool
) -> _Found:
    mode = info.st_mode
    if not open_final or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        # FIFOs, sockets and devices are never opened: opening one can block or act.
        return _Found(parts=parts, mode=mode, size=info.st_size, fd=None)
    flags = _DIR_FLAGS if stat.S_ISDIR(mode) else _FILE_FLAGS
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS:
            raise _RefusedError("changed") from None
        if exc.errno == errno.ENOENT:
            raise _RefusedError("missing") from None
        raise  # such as EACCES: the system's own message names the file
    opened = os.fstat(fd)
    if stat.S_IFMT(opened.st_mode) != stat.S_IFMT(mode):
        # Replaced between the stat and the open: report what was actually opened.
        os.close(fd)
        return _Found(parts=parts, mode=opened.st_mode, size=opened.st_size, fd=None)
    return _Found(parts=parts, mode=opened.st_mode, size=opened.st_size, fd=fd)


def _below_root(root: _Root, target: str) -> list[str] | None:
    pieces = _split_abs(target)
    for prefix in root.prefixes:
        if pieces[: len(prefix)] == prefix:
            return list(pieces[len(prefix) :])
    return None


def _locate(root: _Root, path: str, *, open_final: bool = True) -> _Found:
    """`_resolve` for a user's path, with the errors the model reads."""
    try:
        return _resolve(root, _parts(path), open_final=open_final)
    except _RefusedError as refused:
        if refused.how == "missing":
            raise FileNotFoundError(f"path: {path!r} is missing; expected a file") from None
        if refused.how == "loop":
            raise PermissionError(
                f"refused: {path!r} goes through more than {MAX_LINK_HOPS} symbolic links "
                "(a loop of links?)"
            ) from None
        if refused.how == "changed":
            raise PermissionError(
                f"refused: {path!r} was replaced by a symbolic link while it was opened; try again"
            ) from None
        raise PermissionError(
            f"refused: {path!r} is outside the shared folder ({refused.how} out of it)"
        ) from None


def _shown(parts: list[str]) -> str:
    return "/".join(parts) or "."


@manifest
def list_files(path: str = ".", pattern: str = "*", recursive: bool = False) -> dict[str, Any]:
    """List the files and folders of a folder in the shared folder.

    Args:
        path: Folder relative to the shared folder ("." for its top).
        pattern: Shell-style name filter, such as "*.csv".
        recursive: Also list the contents of sub-folders.
    """
    root = _open_root()
    try:
        try:
            found = _locate(root, path)
        except FileNotFoundError:
            raise NotADirectoryError(
                f"path: {path!r} is nothing, not a folder; use read_file for files"
            ) from None
        if found.fd is None or not stat.S_ISDIR(found.mode):
            if found.fd is not None:
                os.close(found.fd)
            kind = _kind(found.mode)
            if kind == "file":
                raise NotADirectoryError(f"path: {path!r} is a file, not a folder; use read_file")
            raise NotADirectoryError(f"path: {path!r} is {_SPECIAL[kind]}, not a folder")
        listing = _Listing(root, pattern, recursive)
        try:
            listing.walk(found.fd, found.parts, depth=0)
        finally:
            os.close(found.fd)
        return {
            "entries": listing.entries,
            "truncated": listing.truncated,
            "skipped_links": listing.skipped,
        }
    finally:
        os.close(root.fd)


class _Listing:
    """One listing: folders first, then the rest, sorted; sub-folders after their parent's
    entries (as `os.walk`). Links inside the root are shown as what they point to and never
    entered (no loops, no duplicates); links leading out, broken or looping are skipped."""

    def __init__(self, root: _Root, pattern: str, recursive: bool) -> None:
        self.root = root
        self.pattern = pattern
        self.recursive = recursive
        self.entries: list[dict[str, Any]] = []
        self.truncated = False
        self.skipped = 0
        self.scanned = 0

    def walk(self, fd: int, parts: list[str], depth: int) -> None:
        folders: list[tuple[str, bool]] = []  # (name, is a real folder we may enter)
        others: list[tuple[str, int, int]] = []
        for name, mode, size, is_link in self._scan(fd, parts):
            if stat.S_ISDIR(mode):
                folders.append((name, not is_link))
            else:
                others.append((name, mode, size))
            if self.truncated:
                return
        folders.sort()
        others.sort()
        for name, _ in folders:
            self._add([*parts, name], stat.S_IFDIR, 0)
        for name, mode, size in others:
            self._add([*parts, name], mode, size)
        if not self.recursive or self.truncated:
            return
        for name, real in folders:
            if not real:
                continue
            if depth + 1 >= MAX_DEPTH:
                self.truncated = True
                return
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:  # replaced by a link or removed since the scan: not entered
                continue
            try:
                self.walk(child, [*parts, name], depth + 1)
            finally:
                os.close(child)
            if self.truncated:
                return

    def _scan(self, fd: int, parts: list[str]) -> Iterator[tuple[str, int, int, bool]]:
        with os.scandir(fd) as entries:
            for entry in entries:
                self.scanned += 1
                if self.scanned > MAX_SCANNED:
                    self.truncated = True
                    return
                try:
                    info = entry.stat(follow_symlinks=False)  # fstatat on the folder's fd
                except OSError:
                    continue  # removed meanwhile
                if not stat.S_ISLNK(info.st_mode):
                    yield entry.name, info.st_mode, info.st_size, False
                    continue
                try:
                    target = _resolve(self.root, [*parts, entry.name], open_final=False)
                except _RefusedError:
                    self.skipped += 1  # a link out of the shared folder: neither shown nor followed
                    continue
                yield entry.name, target.mode, target.size, True

    def _add(self, parts: list[str], mode: int, size: int) -> None:
        if not fnmatch.fnmatch(parts[-1], self.pattern):
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.truncated = True
            return
        kind = _kind(mode)
        self.entries.append(
            {"path": _shown(parts), "type": kind, "size": size if kind == "file" else None}
        )


@manifest
def read_file(path: str, offset: int = 0, max_chars: int = 20_000) -> dict[str, Any]:
    """Read a text file of the shared folder (a part of it when it is long).

    Args:
        path: File relative to the shared folder.
        offset: Character to start at (to read on after a previous call).
        max_chars: Most characters to return (1-100000).
    """
    if offset < 0:
        raise ValueError(f"offset: expected 0 or more (got {offset})")
    if not 1 <= max_chars <= MAX_CHARS:
        raise ValueError(f"max_chars: expected 1 to {MAX_CHARS} (got {max_chars})")
    root = _open_root()
    try:
        found = _locate(root, path)
    finally:
        os.close(root.fd)
    kind = _kind(found.mode)
    if kind != "file" or found.fd is None:
        if found.fd is not None:
            os.close(found.fd)
        if kind == "folder":
            raise FileNotFoundError(f"path: {path!r} is a folder; expected a file (see list_files)")
        raise PermissionError(
            f"refused: {path!r} is {_SPECIAL[kind]}; only regular text files can be read"
        )
    with os.fdopen(found.fd, "rb") as handle:
        content, total = _read_text(handle, path, offset, max_chars)
    return {
        "path": _shown(found.parts),
        "offset": offset,
        "content": content,
        "total_chars": total,
        "more": offset + len(content) < total,
    }


def _read_text(handle: Any, path: str, offset: int, max_chars: int) -> tuple[str, int]:
    """The characters [offset, offset + max_chars) and the total count, decoding in chunks so a
    large file never sits in memory whole."""
    head = handle.read(8192)
    if b"\x00" in head:
        raise ValueError(f"refused: {path!r} is a binary file; only text files can be read")
    decoder = codecs.getincrementaldecoder("utf-8")()
    end = offset + max_chars
    window: list[str] = []
    seen = 0
    chunk = head
    while True:
        final = not chunk
        try:
            text = decoder.decode(chunk, final=final)
        except UnicodeDecodeError:
            raise ValueError(f"refused: {path!r} is not UTF-8 text") from None
        if text and seen < end and seen + len(text) > offset:
            window.append(text[max(0, offset - seen) : end - seen])
        seen += len(text)
        if final:
            return "".join(window), seen
        chunk = handle.read(65536)
