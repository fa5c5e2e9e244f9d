"""The temporary file of an atomic save, and the clean-up of those a killed save left.

``save(path)`` writes ``.<name>.<pid>.<16 random hex>.chunkstore-tmp`` next to
``path``, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: an existing file or a
symlink planted at that (unpredictable) name makes the creation fail instead of
being followed. HDF5 then writes through ``/proc/self/fd/<fd>`` where there is one,
so the bytes go to the file we created even if its name is swapped meanwhile.

A save killed with SIGKILL leaves its temporary behind. The next save to the same
path removes the temporaries that are clearly ours and dead: the name pattern
(this format's, or format 1's ``<name>.tmp-<pid>``), a regular file (never a
symlink) owned by this user, empty, starting with the HDF5 signature or with zeros
(space reserved before HDF5 wrote: :mod:`chunkstore.hdf5._reserve`), whose
writer process no longer exists and which has not been written to for a minute,
or which has not been written to for a day (its pid may have been reused).

A save interrupted inside this process (Ctrl-C) cleans up after itself
(:func:`temporary`); should the interrupt land where no cleanup can run, the
temporary is still this process's and no save of this process is writing it:
every temporary is registered before it is created, so the next save removes
this process's own temporaries that no running save holds. The descriptor is a
Python file object, which closes itself when dropped.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import threading
import time
import weakref
from collections.abc import Iterator

__all__ = ["create_temporary", "remove_stale_temporaries", "still_ours", "temporary", "writable_name"]

SUFFIX = ".chunkstore-tmp"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: a temporary of a dead writer untouched this long is stale
DEAD_WRITER_GRACE_S = 60.0
#: any temporary untouched this long is stale (its pid may belong to another process now)
ABANDONED_S = 24 * 3600.0


#: temporaries of saves running in this process (registered before they are created)
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


def _excl_opener(name: str, flags: int) -> int:
    return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)


@contextlib.contextmanager
def temporary(path: str) -> Iterator[tuple[str, int]]:
    """A new, empty temporary next to ``path``: ``(name, read-write descriptor)`` for the block.

    The descriptor is closed on the way out; the file is removed if the block
    raised and the file is still the one created here (a rename by the block
    makes it the target's, which is then left alone).
    """
    directory, base = os.path.split(os.path.abspath(path))
    tmp: str | None = None
    f = None
    # one try around everything after the first registration: an interrupt between the file's
    # creation and the block (even on the loop's last line) still unregisters it, so the next
    # save removes what is left (a registered temporary is never removed)
    try:
        for _ in range(100):
            tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(8)}{SUFFIX}")
            with _ACTIVE_LOCK:
                _ACTIVE.add(tmp)
            try:
                # a FileIO closes its descriptor when dropped, wherever an interrupt lands
                f = open(tmp, "w+b", buffering=0, opener=_excl_opener)  # noqa: SIM115 - closed below
            except FileExistsError:
                _forget(tmp)
                continue
            break
        else:
            raise FileExistsError(f"could not create a temporary file next to {path}")
        # and once the file object is gone, whatever happened to this generator (an interrupt just
        # after __enter__ got the file leaves the generator suspended, never resumed: no finally)
        weakref.finalize(f, _forget, tmp)
        assert f is not None and tmp is not None
        try:
            yield tmp, f.fileno()
        except BaseException:
            if still_ours(tmp, f.fileno()):
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
    finally:
        if f is not None:
            f.close()
        if tmp is not None:
            _forget(tmp)


def _forget(tmp: str) -> None:
    with _ACTIVE_LOCK:
        _ACTIVE.discard(tmp)


def create_temporary(path: str) -> tuple[str, int]:
    """A new, empty temporary next to ``path``: its name and an open read-write descriptor.

    The caller closes the descriptor and removes or renames the file; prefer
    :func:`temporary`, which does both whatever interrupts the save.
    """
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
        if m is None:
            continue
        full = os.path.join(directory, name)
        pid = int(m.group(1))
        if pid == os.getpid():  # ours: stale unless a save of this process is writing it
            with _ACTIVE_LOCK:
                stale = full not in _ACTIVE and _looks_like_ours(full) and _is_regular_and_mine(full)
        else:
            stale = _is_stale(full, pid)
        if stale:
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


def _is_regular_and_mine(full: str) -> bool:
    try:
        st = os.lstat(full)
    except OSError:
        return False
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid


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
    # empty, HDF5's signature, or zeros: a save's space reserved before HDF5 wrote anything
    return head in (b"", _HDF5_SIGNATURE, bytes(len(_HDF5_SIGNATURE)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid we can ask about: leave it
    return True
