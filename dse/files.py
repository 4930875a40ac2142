"""Files: written atomically (a reader or a crash sees the old complete file or the new one),
JSON read from a user's file with every way it can be wrong named in one line, a directory
owned by one process at a time (:func:`owned`), and temporary files that do not outlive their
owner even when it is killed outright (:func:`scratch`, :func:`temporary_files`)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from dse.errors import DseError

#: What a write that fails tells the user to do, unless its caller knows better.
WRITE_FIX = "free space there or write elsewhere"


@contextmanager
def staged(path: Path, fix: str = WRITE_FIX) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed onto it when the block succeeds, removed when
    it fails. A write that fails (a full disk, a read-only place) is one line naming the file
    and ending in ``fix``, and ``path`` keeps what it held."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise DseError(f"cannot write {path} ({exc.strerror or exc}): {fix}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_text(path: Path, text: str, fix: str = WRITE_FIX) -> None:
    with staged(path, fix) as tmp:
        tmp.write_text(text)


def write_bytes(path: Path, data: bytes) -> None:
    with staged(path) as tmp:
        tmp.write_bytes(data)


def remove_stale(directory: Path) -> None:
    """Temporary files of :func:`staged` a killed writer left anywhere under ``directory`` (a
    run writes its best mappings' files in subdirectories). A deployment's temporary directory
    is :func:`temporary_files`' to remove, not this."""
    for p in list(Path(directory).rglob(".*.tmp")):
        if not p.is_dir():
            p.unlink(missing_ok=True)


# --- reading a user's JSON -------------------------------------------------------

#: Largest mapping or horizontal file read (a mapping of 100k layers is a few MB).
MAX_JSON_BYTES = 64 * 2**20


def read_json(path: str, what: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file's content, or one line saying why it cannot be read: missing, not a regular
    file, larger than ``max_bytes``, not UTF-8, not JSON, nested too deeply, NaN/Infinity, a
    number too long, or a key twice."""
    p = Path(str(path)).expanduser()
    try:
        if not p.exists():
            raise DseError(f"{what} file not found: {p}")
        if not p.is_file():
            raise DseError(f"{what} file {p} is not a regular file (a directory, device or pipe)")
        size = p.stat().st_size
        if size > max_bytes:
            raise DseError(
                f"{what} file {p} is {size / 2**20:.0f} MB: a {what} file is at most "
                f"{max_bytes // 2**20} MB"
            )
        text = p.read_bytes().decode("utf-8-sig")  # a byte-order mark (Windows editors) is fine
    except UnicodeDecodeError as exc:
        raise DseError(
            f"{what} file {p} is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    except (OSError, RuntimeError) as exc:
        raise DseError(f"cannot read {what} file {p}: {exc.__class__.__name__}") from None
    if not text.strip():
        raise DseError(f"{what} file {p} is empty: it must hold a JSON object")
    try:
        return json.loads(text, parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise DseError(f"{what} file {p} is not valid JSON: {exc}") from None
    except RecursionError:
        raise DseError(f"{what} file {p} is nested too deeply to be a {what}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python refuses over 4300 digits
            raise DseError(
                f"{what} file {p} holds an integer of thousands of digits: write a number"
            ) from None
        raise DseError(f"{what} file {p}: {exc}") from None


def no_constant(name: str) -> Any:
    """A ``json.loads`` hook refusing NaN and Infinity (ValueError)."""
    raise ValueError(f"{name} is not a JSON value (write a number)")


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` hook refusing a key given twice (ValueError)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key '{k}' appears twice (list its entries once)")
        out[k] = v
    return out


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as None, so the JSON printed is valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def writable_dir(directory: Path, key: str = "out") -> Path:
    """``directory``, made if need be, after writing and removing a file in it: a path that is
    a file, or a place that cannot be written, is one line before any work (``key``: the
    setting that names it)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise DseError(f"{key}={directory} is a file: give a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DseError(
            f"cannot write to {key}={directory} ({exc.strerror or exc}): choose another {key}="
        ) from None
    return directory


def writable_file(path: Path, key: str = "out") -> Path:
    """``path`` checked before any work: not a directory, and its folder made and writable
    (:func:`writable_dir`)."""
    path = Path(path)
    if path.is_dir():
        raise DseError(f"{key}={path} is a directory: give the path of the file to write")
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise DseError(f"cannot write {key}={path}: {folder} is a file, not a folder")
    writable_dir(path.parent, key)
    return path


def why_unwritable(path: Path) -> str | None:
    """Why the directory ``path`` cannot be made and written, or None; nothing is made (a
    probe file is written and removed in the deepest folder of ``path`` that exists)."""
    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), Path("/"))
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"{folder}: {exc.strerror or exc}"
    return None


def can_write(path: Path, key: str, free_bytes: int = 0) -> None:
    """One line unless the directory ``path`` can be made and written (:func:`why_unwritable`)
    with ``free_bytes`` free on its disk; nothing is made. ``key``: the setting naming it."""
    why = why_unwritable(path)
    if why is not None:
        raise DseError(f"cannot write to {key}={path} ({why}): choose another {key}")
    folder = next(p for p in (Path(path), *Path(path).parents) if p.exists())
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < free_bytes:
        raise DseError(
            f"{key}={path} is on a full disk ({free / 2**20:.1f} MB free of the "
            f"{free_bytes / 2**20:.0f} MB it needs): free space or choose another {key}"
        )


#: The file in a run or deployment directory that says which process owns it.
LOCK = ".dse.lock"


@contextmanager
def owned(
    directory: Path, what: str = "directory", waiting: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Own ``directory`` for the block: a second process asking for it is refused in one line
    naming the owner (pid, host, since, command) while the owner lives; with ``waiting``, it
    is told who the owner is (``waiting(who)``, once) and waits for the owner to finish. The
    kernel's lock on :data:`LOCK` (``flock``) ends with the owner, however it ends, so a
    directory left by a killed process is taken over with no cleanup; the file stays, naming
    the last owner."""
    directory = Path(directory)
    path = directory / LOCK
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DseError(f"cannot use {directory} ({exc.strerror}): choose another {what}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = owner(fd)
            if waiting is None:
                raise DseError(
                    f"{directory} is in use by {who}: wait for it to finish, or choose another "
                    f"{what}"
                ) from None
            waiting(who)
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:300],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def owner(fd: int) -> str:
    """Who owns the lock file open as ``fd``, as :func:`owned` wrote it."""
    text = os.pread(fd, 4096, 0).decode(errors="replace")
    try:
        o = json.loads(text)
        return f"pid {o['pid']} on {o['host']} since {o['since']} ({o['command']})"
    except (ValueError, KeyError, TypeError):
        return "another process"


# --- temporary directories and files of a process, even one killed outright ----------------

#: The temporary directories of dse's processes: ``dse-*`` in the system's temporary folder.
SCRATCH = "dse-"
#: In a temporary directory: the files elsewhere that go with it (:func:`temporary_files`).
LEFTOVERS = "leftovers.json"


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A new temporary directory (``dse-<prefix>...``) for the block, owned by this process
    (:func:`owned`) and removed at the end of the block. One whose owner was killed outright
    (SIGKILL, the OOM killer: no cleanup ran) is removed by the next :func:`scratch` of any
    process (:func:`remove_dead_scratch`)."""
    remove_dead_scratch()
    try:
        d = Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{prefix}"))
    except OSError as exc:
        raise DseError(
            f"cannot make a temporary directory in {tempfile.gettempdir()} "
            f"({exc.strerror or exc}): free space there or set TMPDIR to another folder"
        ) from None
    try:
        with owned(d, "temporary directory"):
            try:
                yield d
            finally:
                shutil.rmtree(d, ignore_errors=True)  # the lock still held: nobody else removes
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def temporary_files(directory: Path, names: Sequence[str]) -> Iterator[None]:
    """The entries of ``directory`` matching ``names`` (glob patterns of one path component,
    e.g. ``*.onnx``) live only for the block: removed at its end however it ends (files and
    directories; links themselves, never what they point at), and, if this process is killed
    outright, by the next :func:`scratch` of any process (a note in a scratch directory of this
    process says what to remove)."""
    directory, names = Path(directory).absolute(), list(names)
    if any(not n or "/" in n or n in (".", "..") for n in names):
        raise ValueError(f"not names of entries of one directory: {names}")
    with ExitStack() as stack:
        try:
            d = stack.enter_context(scratch("leftovers-"))
            (d / LEFTOVERS).write_text(json.dumps({"directory": str(directory), "names": names}))
        except (DseError, OSError):
            pass  # no temporary folder: removed at the end all the same, only not if killed
        try:
            yield
        finally:
            _remove_matching(directory, names)


def remove_dead_scratch(root: Path | None = None) -> list[Path]:
    """Remove the temporary directories of dead owners in ``root`` (default: the system's
    temporary folder), with the files their notes list (:func:`temporary_files`); the removed
    directories. Only this user's private ``dse-*`` directories holding an owner lock
    (:data:`LOCK`) that no process holds any more are touched: the kernel's lock ends with its
    process, so a live owner's directory is never taken, whatever its age."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH}*"):
        try:
            st = d.lstat()
            fd = os.open(d / LOCK, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue  # not a directory of scratch(), or gone meanwhile
        try:
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                continue  # mkdtemp makes private directories: this one is not ours
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner lives
            if not os.pread(fd, 1, 0):
                continue  # its owner has just made it and has not yet written its name
            _remove_noted(d / LEFTOVERS)
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        finally:
            os.close(fd)
    return removed


def _remove_noted(note: Path) -> None:
    """What a dead owner's note (:func:`temporary_files`) lists, if the note is one."""
    try:
        doc = json.loads(note.read_text()) if note.stat().st_size < 2**16 else None
    except (OSError, ValueError):
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("directory"), str):
        return
    directory, names = Path(doc["directory"]), doc.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        return
    if _in_use(directory):
        return  # another process owns that directory now (e.g. a new run of the deployment)
    _remove_matching(directory, [n for n in names if "/" not in n and n not in (".", "..")])


def _in_use(directory: Path) -> bool:
    """Whether a live process owns ``directory`` (:func:`owned`)."""
    try:
        fd = os.open(directory / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _remove_matching(directory: Path, names: Sequence[str]) -> None:
    for name in names:
        for p in Path(directory).glob(name):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
