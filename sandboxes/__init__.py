"""Isolation mechanisms: where and how a candidate's code is run (local, bubblewrap), and the
workspace it runs on (every file operation beneath it refuses links).

May import ralph.domain only."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ralph.domain.errors import RalphError
from ralph.domain.plugins import instantiate, load, missing_members, protocol_methods
from ralph.domain.protocols import Sandbox
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace

__all__ = ["SANDBOXES", "LocalSandbox", "Workspace", "require_sandbox", "select_sandbox", "sweep_stale"]


_OURS = re.compile(r"^ralph-(\d+)-")
_MADE = re.compile(r"^ralph-(\d+)-(index-)?[a-z0-9_]{8}$")  # the run's directory, a private index


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale(names: Iterable[str]) -> list[str]:
    """The names of ours (`ralph-<pid>-...`) whose process is gone: a run killed with SIGKILL."""
    found = []
    for name in names:
        match = _OURS.match(name)
        if match and int(match[1]) != os.getpid() and not _alive(int(match[1])):
            found.append(name)
    return found


OWNER_LOCK = ".ralph-owner.lock"
EMPTY_AFTER_S = 600.0  # an empty run directory of a process that looks gone is swept this old


def hold_owner_lock(directory: Path) -> int:
    """Mark `directory` as a live run's: a lock file inside it, locked for as long as the returned
    descriptor stays open (the kernel drops it when the process dies, however it dies)."""
    fd = os.open(directory / OWNER_LOCK, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def remove_owned(directory: Path, owner: int) -> None:
    """Remove a directory `hold_owner_lock` marked and release its lock: its lock file goes last,
    and only once everything else is gone, so a run killed at any point leaves the directory
    locked by nobody or empty, and the next run's sweep takes either."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name == OWNER_LOCK:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    with contextlib.suppress(OSError):
        if os.listdir(directory) == [OWNER_LOCK]:
            os.unlink(directory / OWNER_LOCK)
    os.close(owner)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def sweep_stale() -> None:
    """Remove what runs killed with SIGKILL left: their copies of the user's code in the temporary
    directory (only directories of ours, by name and owner, whose run's lock is free: a run in
    another PID namespace sharing /tmp still holds its lock) and their cgroups (a leaked one once
    made a later start fail)."""
    tmp = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        names = os.listdir(tmp)
        for name in names:
            if _OURS.match(name) and _abandoned(tmp / name):
                shutil.rmtree(tmp / name, ignore_errors=True)
        # An empty one of a process that is gone: killed between making it and locking it, or
        # after emptying it (the lock file goes last), before removing it. (By the names mkdtemp
        # gives ours only: an empty `ralph-20240101-x` may be somebody's.) Not one made lately: a
        # process in another PID namespace sharing /tmp looks gone from here, and its private index
        # is empty until git writes it (a run on Ray in CI once lost it so: "index.lock: No such
        # file or directory").
        for name in stale(n for n in names if _MADE.match(n)):
            with contextlib.suppress(OSError):
                if time.time() - (tmp / name).lstat().st_mtime > EMPTY_AFTER_S:
                    os.rmdir(tmp / name)  # (only ever an empty directory)
    from ralph.sandboxes.bwrap import sweep_cgroups

    sweep_cgroups()


def _abandoned(directory: Path) -> bool:
    try:
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        fd = os.open(directory / OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # no lock file: not a run directory of ours (or one from before locks)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a live run holds it
    finally:
        os.close(fd)
    return True


def _bwrap(workspace: Path, writable: Sequence[Path], workspace_writable: bool) -> Sandbox:
    from ralph.sandboxes.bwrap import BwrapSandbox

    return BwrapSandbox(workspace, writable=writable, workspace_writable=workspace_writable)


def _local(workspace: Path, writable: Sequence[Path], workspace_writable: bool) -> Sandbox:
    return LocalSandbox()


SANDBOXES: dict[str, Callable[[Path, Sequence[Path], bool], Sandbox]] = {"bwrap": _bwrap, "local": _local}
"""The built-in sandboxes by name; any other `module:Class` is loaded as a plugin."""


def require_sandbox(name: str) -> None:
    """Fail closed, before any work: an unknown sandbox, a plugin that cannot be imported, or
    bubblewrap missing is a one-line error (`local`, or --no-sandbox, runs without isolation)."""
    if name == "bwrap":
        from ralph.sandboxes.bwrap import available

        if reason := available():
            raise RalphError(
                f"no sandbox: {reason}; refusing to run untrusted code "
                "(install bubblewrap: apt-get install bubblewrap, or pass --no-sandbox)"
            )
    elif ":" in name:
        if missing := missing_members(load(name, "isolation"), Sandbox, protocol_methods(Sandbox)):
            raise _not_a_sandbox(name, missing)
    elif name not in SANDBOXES:
        raise RalphError(f"unknown sandbox {name!r}; available: {', '.join(SANDBOXES)}, or module:Class")


def select_sandbox(
    name: str, workspace: Path, writable: Sequence[Path], *, workspace_writable: bool = True
) -> Sandbox:
    """The sandbox `name` names around the workspace (bubblewrap, `local`: rlimits, a new session
    and timeouts only, or a plugin's `module:Class`); refused (fail closed) when bubblewrap is
    missing, the name is unknown, or a plugin lacks any member of the `Sandbox` Protocol."""
    require_sandbox(name)
    if name in SANDBOXES:
        return SANDBOXES[name](workspace, writable, workspace_writable)
    box = instantiate(name, "isolation", workspace, writable=writable, workspace_writable=workspace_writable)
    if not isinstance(box, Sandbox):
        raise _not_a_sandbox(name, missing_members(box, Sandbox))
    return box


def _not_a_sandbox(name: str, missing: Sequence[str]) -> RalphError:
    """A plugin lacking a member of the Protocol is never used with less isolation than it gives."""
    return RalphError(f"isolation {name}: not a Sandbox (it lacks {', '.join(missing)}); refusing to run")
