"""The temporary file of an atomic save, and the clean-up of those a killed save left.

``save(path)`` writes ``.<name>.<pid>.<16 random hex>.chunkstore-tmp`` next to
``path``, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: an existing file or a
symlink planted at that (unpredictable) name makes the creation fail instead of
being followed. HDF5 then writes through ``/proc/self/fd/<fd>`` where there is one,
so the bytes go to the file we created even if its name is swapped meanwhile.

A save killed with SIGKILL leaves its temporary behind. The next save to the same
path removes the temporaries that are clearly ours and dead: the name pattern
(this format's, or format 1's ``<name>.tmp-<pid>``), a regular file (never a
symlink) owned by this user, empty or starting with the HDF5 signature, whose
writer process no longer exists and which has not been written to for a minute,
or which has not been written to for a day (its pid may have been reused).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time

__all__ = ["create_temporary", "remove_stale_temporaries", "still_ours", "writable_name"]

SUFFIX = ".chunkstore-tmp"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: a temporary of a dead writer untouched this long is stale
DEAD_WRITER_GRACE_S = 60.0
#: any temporary untouched this long is stale (its pid may belong to another process now)
ABANDONED_S = 24 * 3600.0


def create_temporary(path: str) -> tuple[str, int]:
    """A new, empty temporary next to ``path``: its name and an open read-write descriptor."""
    directory, base = os.path.split(os.path.abspath(path))
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(8)}{SUFFIX}")
        try:
            return tmp, os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {path}")


def writable_name(tmp: str, fd: int) -> str:
    """The name HDF5 should open: the descriptor's own /proc entry where there is one."""
    proc = f"/proc/self/fd/{fd}"
    try:
        if os.path.samestat(os.stat(proc), os.fstat(fd)):
            return proc
    except OSError:
        pass
    return tmp


def still_ours(tmp: str, fd: int) -> bool:
    """Whether ``tmp`` still names the file behind ``fd`` (checked before the rename)."""
    try:
        return os.path.samestat(os.stat(tmp, follow_symlinks=False), os.fstat(fd))
    except OSError:
        return False


def remove_stale_temporaries(path: str) -> list[str]:
    """Remove the temporaries of earlier killed saves to ``path``; return their names."""
    directory, base = os.path.split(os.path.abspath(path))
    patterns = (re.compile(rf"\.{re.escape(base)}\.(\d+)\.[0-9a-f]{{16}}{re.escape(SUFFIX)}"),
                re.compile(rf"{re.escape(base)}\.tmp-(\d+)"))  # format 1's name
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = patterns[0].fullmatch(name) or patterns[1].fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        full = os.path.join(directory, name)
        if _is_stale(full, int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(full)
                removed.append(full)
    return removed


def _is_stale(full: str, pid: int) -> bool:
    try:
        st = os.lstat(full)
    except OSError:
        return False
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid  # no owners to compare on Windows
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or not _looks_like_ours(full):
        return False
    idle = time.time() - st.st_mtime
    return idle >= ABANDONED_S or (idle >= DEAD_WRITER_GRACE_S and not _alive(pid))


def _looks_like_ours(full: str) -> bool:
    try:
        fd = os.open(full, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError:
        return False
    try:
        head = os.read(fd, len(_HDF5_SIGNATURE))
    except OSError:
        return False
    finally:
        os.close(fd)
    return head in (b"", _HDF5_SIGNATURE)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid we can ask about: leave it
    return True
