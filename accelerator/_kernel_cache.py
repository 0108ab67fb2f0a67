"""The compile cache: kernels compiled from source, on disk, shared by
processes.

One file per compile, named by a SHA-256 of everything that changes the
result (the format, who compiles: compiler, version, target architecture
and library, the library file's size and time, the options, the name
expressions and the source).  A file holds a small header (its format,
the lowered names, the code's length and SHA-256) and the code; one whose
header or digest does not match is damaged, ignored and rebuilt.  Writes
go to a temporary file in the same folder, then ``os.replace``: readers
see a whole entry or none, whichever of several writers wins.  The folder
is held under ``ACCELERATOR_KERNEL_CACHE_MAX_BYTES`` (default 1 GiB) by
removing the entries used least recently.

``ACCELERATOR_KERNEL_CACHE_DIR`` names the folder (empty: no cache);
unset, it is ``$XDG_CACHE_HOME/accelerator/kernels`` (``~/.cache/...``).
A folder that cannot be written costs the caching, never the compile: a
``RuntimeWarning`` says so once per folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence

_MAGIC = b"accelerator kernel cache 1\n"
_DEFAULT_MAX_BYTES = 1 << 30
#: Temporary files older than this are a dead writer's, removed when the
#: folder is pruned.
_STALE_SECONDS = 3600.0
_SUFFIX = ".kernel"
#: What the compilers make (an entry of another format is damaged).
_CODE_FORMATS = ("ptx", "cubin", "hsaco", "spirv")

_warned: set[str] = set()
_lock = threading.Lock()


def folder() -> str | None:
    """The cache's folder, or None when caching is off."""
    named = os.environ.get("ACCELERATOR_KERNEL_CACHE_DIR")
    if named is not None:
        return named or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "accelerator", "kernels")


def max_bytes() -> int:
    text = os.environ.get("ACCELERATOR_KERNEL_CACHE_MAX_BYTES", "")
    try:
        value = int(text) if text else _DEFAULT_MAX_BYTES
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"ACCELERATOR_KERNEL_CACHE_MAX_BYTES={text!r}, "
                         "expected a number of bytes >= 0")
    return value


def key(fmt: str, ident: str, options: Sequence[str],
        names: Sequence[str], source: bytes) -> str:
    """The entry's name: a digest of all that changes the compiled code."""
    h = hashlib.sha256(_MAGIC)
    # Who compiles: "<compiler> <version> <target> <library path>".
    library = ident.split(" ", 3)[-1]
    try:
        st = os.stat(library)
        stamp = f"{st.st_size} {st.st_mtime_ns}"
    except OSError:               # a name the loader found: ident only
        stamp = "-"
    parts = [fmt, ident, stamp, str(len(options)), *options,
             str(len(names)), *names]
    for part in parts:
        data = part.encode("utf-8", "surrogateescape")
        h.update(len(data).to_bytes(8, "little") + data)
    h.update(source)
    return h.hexdigest()


def _warn_once(where: str, error: OSError) -> None:
    with _lock:
        if where in _warned:
            return
        _warned.add(where)
    what = error.strerror or str(error)
    # The file that failed (a rename's target first), where it is not
    # the folder itself.
    for name in (error.filename2, error.filename):
        if name and os.path.abspath(name) != os.path.abspath(where):
            what += f": {name}"
            break
    warnings.warn(f"accelerator: the kernel cache folder {where!r} cannot "
                  f"be written ({what}); compiling "
                  "without caching (set ACCELERATOR_KERNEL_CACHE_DIR to "
                  "another folder, or to '' for no cache)", RuntimeWarning,
                  stacklevel=4)


def _decode(data: bytes) -> tuple[bytes, str, dict[str, str]] | None:
    if not data.startswith(_MAGIC):
        return None
    at = len(_MAGIC)
    end = data.find(b"\n", at)
    if end < 0:
        return None
    try:
        header = json.loads(data[at:end])
        code = data[end + 1:]
        ok = (isinstance(header, dict)
              and header.get("size") == len(code)
              and header.get("sha256") == hashlib.sha256(code).hexdigest()
              and header.get("format") in _CODE_FORMATS
              and isinstance(header.get("lowered"), dict)
              and all(isinstance(k, str) and isinstance(v, str)
                      for k, v in header["lowered"].items()))
    except (ValueError, RecursionError):    # (UnicodeDecodeError too)
        return None
    return (code, header["format"], header["lowered"]) if ok else None


def _read(path: str) -> bytes | None:
    """What the file at path holds, or None: no such file, or not a
    regular one (opened without waiting: a FIFO would wait for a writer;
    read to its size: /dev/zero would never end), which is removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read(st.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    _remove(path)
    return None


def load(name: str) -> tuple[bytes, str, dict[str, str]] | None:
    """(code, format, lowered names) of entry name, or None: no cache, no
    such entry, or a damaged one (removed, to be rebuilt)."""
    where = folder()
    if where is None:
        return None
    path = os.path.join(where, name + _SUFFIX)
    data = _read(path)
    if data is None:
        return None
    entry = _decode(data)
    try:
        if entry is None:
            os.unlink(path)
        else:
            os.utime(path)        # used now: the last to be pruned
    except OSError:
        pass
    return entry


def store(name: str, code: bytes, fmt: str, lowered: dict[str, str]) -> None:
    """Write entry name atomically; a folder that cannot be written is
    said once and otherwise ignored."""
    where = folder()
    if where is None:
        return
    header = json.dumps({"format": fmt, "lowered": lowered,
                         "size": len(code),
                         "sha256": hashlib.sha256(code).hexdigest()},
                        sort_keys=True).encode()
    tmp = None
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=where)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + header + b"\n" + code)
        os.replace(tmp, os.path.join(where, name + _SUFFIX))
        tmp = None
    except OSError as e:
        _warn_once(where, e)
        return
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    prune(where, max_bytes())


def prune(where: str, limit: int) -> None:
    """Remove the least recently used entries of where until what is left
    takes at most limit bytes, and dead writers' temporary files."""
    entries = []
    total = 0
    now = time.time()
    try:
        with os.scandir(where) as it:
            for e in it:
                if not e.name.endswith(_SUFFIX) or not e.is_file():
                    continue
                try:
                    st = e.stat()
                except OSError:
                    continue
                if e.name.startswith(".tmp-"):
                    if now - st.st_mtime > _STALE_SECONDS:
                        _remove(e.path)
                    continue
                entries.append((st.st_mtime, st.st_size, e.path))
                total += st.st_size
    except OSError:
        return
    entries.sort()
    for _, size, path in entries:
        if total <= limit:
            break
        _remove(path)
        total -= size


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
