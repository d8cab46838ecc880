"""Run a command in the workspace as a plain child process: own session, rlimits, timeout, capped output."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ralph.domain.protocols import Command
from ralph.domain.results import ProcessResult

# Environment variables a child may see; everything else (API keys included) is dropped.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SYSTEMROOT", "VIRTUAL_ENV")


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An allowlisted copy of our environment, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST}
    env.setdefault("PATH", "/usr/bin:/bin")
    env["HOME"] = env.get("HOME", tempfile.gettempdir())
    env.update(extra or {})
    return env


class LocalSandbox:
    """No isolation beyond a new session, rlimits and a timeout; the process group is killed on timeout.

    It implements the whole `Sandbox` Protocol: the workspace is seen at its own path (`mount_at`
    None, `inside`/`outside` the identity, no mount points to make, no other view of it), and
    nothing outlives a command (`close` has nothing to release)."""

    name = "local"
    mount_at: Path | None = None

    def __init__(self, *, memory_bytes: int = 4 << 30, max_output: int = 1 << 20) -> None:
        self.memory_bytes = memory_bytes
        self.max_output = max_output
        self._live: set[subprocess.Popen[bytes]] = set()  # what runs now, for `cancel`
        self._cancelled = False
        self._starting = threading.Lock()  # a command starts, or the sandbox is cancelled: not both

    def _limit(self, pid: int) -> None:
        # Set from outside, right after the start: a preexec_fn would force a full fork of this
        # (large) process instead of vfork/spawn (docs/measurements.md).
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError, OSError):
            resource.prlimit(pid, resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult:
        """Run `argv` in `cwd` with an allowlisted environment plus `env`."""
        with self._starting:
            if self._cancelled:
                return ProcessResult(-9, "", 0.0, error="cancelled")
            started = self.start(argv, cwd=cwd, env=env, stdin=stdin)
            self._live.add(started.proc)
        try:
            return started.wait(timeout_s)
        finally:
            self._live.discard(started.proc)

    def cancel(self) -> None:
        """Kill what `run` runs now, with its process group (from another thread), and run nothing more."""
        with self._starting:
            self._cancelled = True
        for proc in list(self._live):
            kill_group(proc)

    def wrap(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None) -> Command:
        """`argv` as it is: no isolation to add (nor rlimits, which are set from outside once a
        process has started); the caller gives it a session of its own and kills its group."""
        return Command(argv)

    def close(self) -> None:
        """Nothing to release: every command `run` starts is killed and reaped when it returns."""

    def mounted_at(self, path: Path) -> None:
        """None: without mount namespaces the workspace is seen at its own path only."""
        return None

    def prepare(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[Path]:
        """None made: nothing is mounted."""
        return []

    def inside(self, text: str) -> str:
        """`text` unchanged: commands see the host's paths."""
        return text

    def outside(self, text: str) -> str:
        """`text` unchanged: commands see the host's paths."""
        return text

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> Started:
        """Start `argv` and return at once: the caller works while it runs, then waits for it."""
        # Output goes to an unlinked temp file, so a child printing gigabytes never fills our memory.
        out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by Started.wait)
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=child_env(env),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            out.close()
            raise
        self._limit(proc.pid)
        if stdin is not None and proc.stdin is not None:
            threading.Thread(target=feed_stdin, args=(proc.stdin, stdin.encode()), daemon=True).start()
        return Started(proc, out, self.max_output)


class Started:
    """A process `LocalSandbox.start` started; `wait` once for its result."""

    def __init__(self, proc: subprocess.Popen[bytes], out: IO[bytes], max_output: int) -> None:
        self.proc, self.out, self.max_output = proc, out, max_output
        self.began = time.monotonic()

    def wait(self, timeout_s: float) -> ProcessResult:
        """Its result; past `timeout_s` (counted from its start) it is killed with its group."""
        with self.out:
            try:
                left = max(0.0, timeout_s - (time.monotonic() - self.began))
                timed_out = not wait_exit(self.proc, left)
            finally:
                kill_group(self.proc)
            returncode = -9 if timed_out else self.proc.returncode
            output = read_capped(self.out, self.max_output)
        return ProcessResult(returncode, output, time.monotonic() - self.began, timed_out)


def feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    """Write `data` to the child's stdin and close it (in a thread: a child may never read it)."""
    with contextlib.suppress(OSError), pipe:
        pipe.write(data)


def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for `proc` to exit; False on timeout.

    A pidfd wakes us the moment it exits: ``Popen.wait(timeout)`` polls with sleeps growing to
    50 ms, which adds milliseconds to every sandboxed call (docs/measurements.md).
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # kernels before 5.3
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    if ready:
        proc.wait()
    return bool(ready)


def read_capped(out: IO[bytes], limit: int) -> str:
    """The file's text, or its head and tail with a marker when it is over `limit` bytes."""
    size = out.seek(0, os.SEEK_END)
    out.seek(0)
    if size <= limit:
        return out.read().decode("utf-8", "replace")
    half = limit // 2
    head = out.read(half)
    out.seek(size - half)
    tail = out.read(half)
    dropped = size - 2 * half
    return (
        head.decode("utf-8", "replace")
        + f"\n[... {dropped} bytes of output dropped ...]\n"
        + tail.decode("utf-8", "replace")
    )


def read_regular(
    path: str | os.PathLike[str], limit: int = 256 << 20, *, dir_fd: int | None = None
) -> bytes | None:
    """A file a sandboxed process wrote, read without following a link or blocking on a FIFO
    planted in its place; None unless it is a regular file under `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return f.read(limit + 1)[:limit]


class ScratchDir:
    """A fresh directory for files a sandboxed process writes for us, held open from its creation:
    its files are read through that descriptor, so a process that swaps the directory for a link
    (the scratch area is writable in the sandbox) cannot point our reads elsewhere."""

    def __init__(self, parent: str | os.PathLike[str] | None, prefix: str) -> None:
        self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if parent is not None and (owner := os.stat(parent)).st_uid != os.geteuid():
            os.fchown(self.fd, owner.st_uid, owner.st_gid)  # the scratch area's (sandbox's) user writes here

    def __enter__(self) -> ScratchDir:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        with contextlib.suppress(OSError):
            if os.path.islink(self.path):
                os.unlink(self.path)
            else:
                shutil.rmtree(self.path, ignore_errors=True)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def read(self, name: str, limit: int = 256 << 20) -> bytes | None:
        return read_regular(name, limit, dir_fd=self.fd)


_OWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralph-spawner")


def popen_owned(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen`, always from one long-lived thread. bubblewrap's `--die-with-parent` (a
    parent-death signal) follows the *thread* that started it: a sandboxed worker started from a
    thread pool's thread would die as soon as that thread exits."""

    def start() -> subprocess.Popen[Any]:
        return subprocess.Popen(list(argv), **kwargs)

    future = _OWNER.submit(start)
    try:
        return future.result()
    except BaseException:  # Ctrl-C while it started: it must not run on unowned
        with contextlib.suppress(BaseException):
            kill_group(future.result(timeout=30))
        raise


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill the child's whole process group (children it forked included) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def read_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The next line a long-lived child writes on its stdout; None on a timeout or at its end."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return (proc.stdout.readline() or None) if ready else None
