"""A private copy of the user's project where candidates are applied, checked and rolled back.

Everything the host does to the workspace goes through file descriptors opened one path component
at a time with ``O_NOFOLLOW`` beneath the workspace root: a symlink (or a directory swapped for one
by a process the sandbox left behind) makes the operation fail; it never reaches outside.

Between candidates the workspace is put back exactly as the accepted state had it (`restore`): files
a candidate's tests wrote are removed, files they changed are rewritten from a host-only copy, so a
rejected candidate cannot leave anything (a forging conftest, a poisoned bytecode cache) for the next.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ralph.domain.candidate import FileChange, undoing
from ralph.domain.errors import UnsafePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def safe_parts(path: str) -> tuple[str, ...]:
    """The components of a project-relative `path`, refusing anything that could escape."""
    rel = PurePosixPath(path.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or "\0" in path:
        raise UnsafePath(f"{path}: edits must use a relative path inside the project")
    if any(part.lower() == ".git" for part in rel.parts):
        raise UnsafePath(f"{path}: edits under .git are not allowed")
    return tuple(p for p in rel.parts if p != ".")


def chown_tree(path: Path, ids: tuple[int, int] | None) -> None:
    """Give `path` and everything beneath it (following no link) to `ids`, the sandbox's user; an
    entry that is already theirs is left alone (a chown would change its ctime all the same)."""
    if ids is None:
        return

    def give(entry: str) -> None:
        with contextlib.suppress(OSError):
            info = os.lstat(entry)
            if (info.st_uid, info.st_gid) != ids:
                os.chown(entry, *ids, follow_symlinks=False)

    give(str(path))
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            give(os.path.join(directory, name))


@contextlib.contextmanager
def open_dir(
    root: Path, parts: Sequence[str], *, create: bool = False, owner: tuple[int, int] | None = None
) -> Iterator[int]:
    """A descriptor of the directory `root/parts...`, each component opened without following a link
    (`create` makes missing ones, given to `owner`)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                child = open_subdir(part, fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                _chown(part, fd, owner)
                child = open_subdir(part, fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def open_subdir(name: str, dir_fd: int) -> int:
    """A descriptor of the directory `name` in `dir_fd`, opened without following a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{name}: a symlink or not a directory on the way") from None
        raise


def read_beneath(root: Path, path: str, limit: int = 64 << 20) -> bytes | None:
    """The bytes of the regular file `root/path`, never through a symlink or outside `root`; None
    when it is missing, not a regular file, unsafe or over `limit`."""
    found = stat_and_read_beneath(root, path, limit)
    return found[1] if found else None


def stat_and_read_beneath(
    root: Path, path: str, limit: int = 64 << 20
) -> tuple[os.stat_result, bytes] | None:
    """`read_beneath` with the file's status as it was read (one open, no race between the two)."""
    try:
        parts = safe_parts(path)
        with open_dir(root, parts[:-1]) as dir_fd:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except (OSError, UnsafePath):
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return info, f.read(limit + 1)[:limit]


def read_text_beneath(root: Path, path: str) -> str | None:
    """`read_beneath` decoded as UTF-8 with universal newlines and without a byte-order mark (as
    drafters read source; `Workspace.encode` puts both back); None when it cannot be read safely or
    is not UTF-8."""
    data = read_beneath(root, path)
    return None if data is None else as_text(data)


def as_text(data: bytes) -> str | None:
    """A file's bytes as drafters see them: UTF-8, `\n` line ends, no byte-order mark."""
    try:
        text = data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")


_BOM = b"\xef\xbb\xbf"


def encode_like(content: str, original: bytes | None) -> bytes:
    """`content` (text as drafters see it: `\n` line ends, no byte-order mark) as bytes with the
    line endings and byte-order mark of `original`. A file with mixed or bare-CR line endings is
    not rewritten (that would change every line of one kind): UnsafePath."""
    first = original or b""
    crlf, lf = first.count(b"\r\n"), first.count(b"\n")
    if first.count(b"\r") != crlf or 0 < crlf < lf:
        raise UnsafePath(
            "the file has mixed line endings (CRLF and LF, or bare CR); ralph does not rewrite it"
        )
    data = content.removeprefix("\ufeff").encode("utf-8")
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    return (_BOM if first.startswith(_BOM) else b"") + data


def write_beneath(
    root: Path, path: str, data: bytes, *, mode: int | None = None, owner: tuple[int, int] | None = None
) -> os.stat_result:
    """Write `data` to `root/path` atomically (a new file renamed over the old), through no symlink;
    the file and the directories made for it belong to `owner` when given."""
    parts = safe_parts(path)
    with open_dir(root, parts[:-1], create=True, owner=owner) as dir_fd:
        partial = f".{parts[-1]}.ralph-{os.getpid()}.partial"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=dir_fd)
        fd = os.open(
            partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if owner is not None:
                    os.fchown(f.fileno(), *owner)
                if mode is not None:
                    os.fchmod(f.fileno(), mode)
            os.rename(partial, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=dir_fd)
            raise
        return os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)


def _chmod_dir(name: str, mode: int, dir_fd: int) -> None:
    """Set a directory's mode, never through a link: `name` is opened as a directory without
    following one (O_PATH needs no permission on it), then changed through that descriptor."""
    fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{fd}", mode)  # (the descriptor's own directory, not a path again)
    finally:
        os.close(fd)


def _chown(name: str, dir_fd: int, owner: tuple[int, int] | None) -> None:
    """Give an entry the workspace's owner (the sandbox's user, when ralph runs as root)."""
    if owner is not None:
        os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)


def _remove_entry(name: str, dir_fd: int) -> None:
    """Remove a file, link or whole directory tree in `dir_fd`, following no link."""
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based on Linux: safe against symlink races
    else:
        os.unlink(name, dir_fd=dir_fd)


@dataclass(frozen=True)
class _Entry:
    kind: str  # "file", "dir" or "link"
    key: tuple[int, ...]  # what a change of the entry changes (a file's inode, size, times, mode)
    link: str = ""


def _key(info: os.stat_result) -> tuple[int, ...]:
    # ctime cannot be set from user space: any write, chmod or rename-over changes it.
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode)


class Workspace:
    """Files of the project, copied from the snapshot; `.git` is never inside.

    `capture` records the accepted state (and keeps a host-only copy of its files beside the
    workspace); `restore` puts that state back exactly; `accept` makes the current edit part of it.
    """

    def __init__(self, root: Path, subdir: str = "", *, owner: tuple[int, int] | bool | None = True) -> None:
        """`owner`: who the files belong to (True: the sandbox's user when ralph runs as root, so
        that the tests may write where the user's would; None: left as they are)."""
        if owner is True:
            from ralph.sandboxes.bwrap import sandbox_ids

            owner = sandbox_ids()
        self.owner: tuple[int, int] | None = owner or None
        chown_tree(root, self.owner)
        self.root = root.resolve()
        self.project = (self.root / subdir).resolve() if subdir else self.root
        self.subdir = subdir
        self._mtimes: dict[str, int] = {}
        self._state: dict[tuple[str, ...], _Entry] | None = None
        self._tree: dict[tuple[str, ...], dict[str, _Entry]] | None = None  # `_children`'s
        # Whether a restore had to put back something other than the edit's own files (and bytecode):
        # then a process may have read what a candidate's tests wrote (see `take_foreign`).
        self._foreign = False
        self._own: set[tuple[str, ...]] = set()
        # Each file's bytes as first seen: its line endings and byte-order mark are kept on every write.
        self._first: dict[str, bytes | None] = {}
        self._pristine = self.root.with_name(self.root.name + ".accepted")
        self._made: set[tuple[str, ...]] = set()  # directories accepted edits made
        self._modes: dict[tuple[str, ...], int] = {}  # modes of files accepted deletions removed

    @property
    def accepted_project(self) -> Path:
        """The project as accepted so far: the host-only copy `capture` keeps, which no candidate's
        edit or code reaches. Drafters read it, so one that drafts while a candidate is applied and
        verified (a remote model's parallel requests) never sees that candidate's files."""
        if self._state is None:
            return self.project
        return self._pristine / self.subdir if self.subdir else self._pristine

    def resolve(self, path: str) -> Path:
        """The absolute file for a project-relative `path`, refusing anything that could escape."""
        parts = safe_parts(path)
        probe = self.project
        for part in parts:
            probe = probe / part
            if probe.is_symlink():
                raise UnsafePath(f"{path}: edits through symlinks are not allowed")
        return self.project.joinpath(*parts)

    def read(self, path: str) -> str | None:
        """A project file's text (None when missing); an unsafe path raises `UnsafePath`."""
        self.resolve(path)
        data = read_beneath(self.project, path)
        if data is None:
            return None
        text = as_text(data)
        if text is None:
            raise UnicodeDecodeError("utf-8", data, 0, 1, f"{path} is not UTF-8 text")
        return text

    def apply(self, changes: Sequence[FileChange]) -> None:
        """Write every change's `after`, all or nothing: paths are checked before anything is written,
        and a write that fails (a path both a file and a directory, say) undoes the ones before it."""
        for change in changes:
            self.resolve(change.path)
        done: list[FileChange] = []
        try:
            for change in changes:
                self._write(change.path, change.after)
                done.append(change)
        except (OSError, UnsafePath) as exc:
            self.revert(done)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise UnsafePath(f"the edit cannot be written: {reason}") from None

    def revert(self, changes: Sequence[FileChange]) -> None:
        """Put back every change's `before`."""
        for change in changes:
            with contextlib.suppress(OSError, UnsafePath):
                self._write(change.path, change.before)

    def encode(self, path: str, content: str) -> bytes:
        """`content` as the file's bytes (`encode_like` the file as ralph first saw it)."""
        rel = self._rel(path)
        if rel not in self._first:
            first = read_beneath(self._pristine if self._state is not None else self.root, rel)
            if first is None and self._state is not None:
                first = read_beneath(self.root, rel)
            self._first[rel] = first
        return encode_like(content, self._first[rel])

    def _rel(self, path: str) -> str:
        return f"{self.subdir}/{path}" if self.subdir else path

    def _write(self, path: str, content: str | None) -> None:
        rel = self._rel(path)
        parts = safe_parts(rel)
        if content is None:
            with contextlib.suppress(FileNotFoundError), open_dir(self.root, parts[:-1]) as dir_fd:
                os.unlink(parts[-1], dir_fd=dir_fd)
            return
        old = None
        with contextlib.suppress(OSError, UnsafePath), open_dir(self.root, parts[:-1]) as dir_fd:
            old = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise UnsafePath(f"{path}: not a regular file")
        mode = stat.S_IMODE(old.st_mode) if old else None
        write_beneath(self.root, rel, self.encode(path, content), mode=mode, owner=self.owner)
        # Python's bytecode cache trusts (mtime in whole seconds, size): two same-size edits within a
        # second would reuse stale bytecode. Each write gets a later whole second than the last one.
        last = self._mtimes.get(rel, int(old.st_mtime) if old else 0)
        second = max(int(time.time()), last + 1)
        self._mtimes[rel] = second
        with open_dir(self.root, parts[:-1]) as dir_fd:
            ns = second * 1_000_000_000
            os.utime(parts[-1], ns=(ns, ns), dir_fd=dir_fd, follow_symlinks=False)

    # The accepted state, and putting it back. Entries are keyed by their raw path components
    # (names are never re-parsed: a `.git` or a backslash in a name stays what it is).

    def capture(self) -> None:
        """Record what is in the workspace now as the accepted state, with a host-only copy
        (sockets and FIFOs the baseline's tests left are not part of a state)."""
        shutil.rmtree(self._pristine, ignore_errors=True)
        shutil.copytree(self.root, self._pristine, symlinks=True, ignore=_special_files)
        self._state, self._tree = dict(self._scan(())), None

    def accept(self, changes: Sequence[FileChange]) -> None:
        """The accepted state plus these changes is the new state; anything else the candidate's
        processes wrote is then removed by `restore`, and each changed file is rewritten from the
        host-only copy (its mode and mtime kept), whatever a test did to it."""
        if self._state is None:  # nothing captured: the workspace as it is is the state
            return
        self._tree = None
        for change in changes:
            rel = self._rel(change.path)
            parts = safe_parts(rel)
            self._own.add(parts)
            previous = self._pristine.joinpath(*parts)
            if change.after is None:
                self._delete_accepted(parts, previous)
                continue
            mode = stat.S_IMODE(previous.lstat().st_mode) if previous.is_file() else self._modes.get(parts)
            written = write_beneath(self._pristine, rel, self.encode(change.path, change.after), mode=mode)
            ns = self._mtimes.get(rel, int(written.st_mtime)) * 1_000_000_000
            os.utime(previous, ns=(ns, ns))
            self._state[parts] = _Entry("file", (-1,))  # never matches: rewritten from the copy
            for i in range(1, len(parts)):
                if parts[:i] not in self._state:
                    self._state[parts[:i]] = _Entry("dir", (0o755,))
                    self._made.add(parts[:i])
        self.restore()

    def _delete_accepted(self, parts: tuple[str, ...], previous: Path) -> None:
        """An accepted deletion: the file leaves the state (its mode is kept, should it come back), and
        so do the directories an accepted edit made that are now empty."""
        state = self._state
        assert state is not None  # (accept returns early without one)
        if previous.is_file() and not previous.is_symlink():
            self._modes[parts] = stat.S_IMODE(previous.lstat().st_mode)
        state.pop(parts, None)
        with contextlib.suppress(OSError, UnsafePath), open_dir(self._pristine, parts[:-1]) as fd:
            os.unlink(parts[-1], dir_fd=fd)
        for i in range(len(parts) - 1, 0, -1):
            folder = parts[:i]
            if folder not in self._made or any(k[:i] == folder and k != folder for k in state):
                break
            self._made.discard(folder)
            state.pop(folder, None)
            with contextlib.suppress(OSError, UnsafePath), open_dir(self._pristine, folder[:-1]) as fd:
                os.rmdir(folder[-1], dir_fd=fd)

    def revert_accepted(self, changes: Sequence[FileChange]) -> None:
        """Take accepted `changes` (applied in order) out of the accepted state again."""
        self.accept(undoing(changes))

    def clone(self, root: Path) -> Workspace:
        """A second workspace at `root` holding exactly the accepted state, captured (the background
        gate's own copy)."""
        source = self._pristine if self._state is not None else self.root
        shutil.copytree(source, root, symlinks=True, ignore=_special_files)
        other = Workspace(root, self.subdir, owner=self.owner)
        other._first = dict(self._first)
        other.capture()
        return other

    def restore(self, changes: Sequence[FileChange] = ()) -> int:
        """Put the accepted state back exactly (then apply `changes`); returns how many entries it
        had to remove or rewrite. Call only when nothing of the sandbox is running."""
        fixed = 0
        if self._state is not None:
            self._own |= {safe_parts(self._rel(c.path)) for c in changes}
            with open_dir(self.root, ()) as fd:
                fixed = self._restore_dir((), self._children(), fd)
        if changes:
            self.apply(changes)
        return fixed

    def rollback(self, changes: Sequence[FileChange]) -> None:
        """Undo a rejected edit: the accepted state exactly when captured, else the edit's `before`."""
        if self._state is None:
            self.revert(changes)
            return
        self._own |= {safe_parts(self._rel(c.path)) for c in changes}
        self.restore()

    def take_foreign(self) -> bool:
        """Whether restores since the last call put back anything but the edits' own files and
        bytecode (what a candidate's tests wrote elsewhere); resets the flag."""
        foreign, self._foreign, self._own = self._foreign, False, set()
        return foreign

    def _fixing(self, path: tuple[str, ...]) -> None:
        if path not in self._own and "__pycache__" not in path:
            self._foreign = True

    def _scan(self, parts: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], _Entry]]:
        with open_dir(self.root, parts) as fd, os.scandir(fd) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                path = (*parts, entry.name)
                if stat.S_ISDIR(info.st_mode):
                    yield path, _Entry("dir", (stat.S_IMODE(info.st_mode),))
                    yield from self._scan(path)
                elif stat.S_ISLNK(info.st_mode):
                    yield path, _Entry("link", (), os.readlink(entry.name, dir_fd=fd))
                elif stat.S_ISREG(info.st_mode):
                    yield path, _Entry("file", _key(info))
                # sockets, FIFOs, devices: never part of a state

    def _children(self) -> dict[tuple[str, ...], dict[str, _Entry]]:
        """The accepted state by directory (each directory's entries by name), kept between restores."""
        if self._tree is None:
            assert self._state is not None
            tree: dict[tuple[str, ...], dict[str, _Entry]] = {(): {}}
            for parts, entry in self._state.items():
                tree.setdefault(parts[:-1], {})[parts[-1]] = entry
            self._tree = tree
        return self._tree

    def _restore_dir(
        self, parts: tuple[str, ...], children: dict[tuple[str, ...], dict[str, _Entry]], fd: int
    ) -> int:
        """Put back the directory `parts`, open as `fd`, and everything below it (each directory
        opened from its parent's descriptor, following no link)."""
        fixed = 0
        wanted = children.get(parts, {})
        with os.scandir(fd) as it:
            present = {e.name: e.stat(follow_symlinks=False) for e in it}
        for name, info in present.items():
            entry = wanted.get(name)
            if entry is not None and entry.kind == "file" and _key(info) == entry.key:
                continue  # (the common case, first: a file's key holds its mode, a regular file's)
            if entry is not None and entry.kind == "dir" and stat.S_ISDIR(info.st_mode):
                if stat.S_IMODE(info.st_mode) != entry.key[0]:  # a test's chmod: put it back
                    _chmod_dir(name, entry.key[0], fd)
                    fixed += 1
                    self._fixing((*parts, name))
                continue
            if entry is None or not _matches(entry, info, name, fd):
                _force_remove(name, fd)
                fixed += 1
                self._fixing((*parts, name))
                if entry is not None:
                    self._put((*parts, name), entry, fd, name)
        for name, entry in wanted.items():
            path = (*parts, name)
            if name not in present:
                fixed += 1
                self._fixing(path)
                self._put(path, entry, fd, name)
            if entry.kind == "dir":
                child = open_subdir(name, fd)
                try:
                    fixed += self._restore_dir(path, children, child)
                finally:
                    os.close(child)
        return fixed

    def _put(self, path: tuple[str, ...], entry: _Entry, dir_fd: int, name: str) -> None:
        if entry.kind == "dir":
            os.mkdir(name, entry.key[0], dir_fd=dir_fd)
            _chmod_dir(name, entry.key[0], dir_fd)  # (mkdir's mode is masked by the umask)
            _chown(name, dir_fd, self.owner)
        elif entry.kind == "link":
            os.symlink(entry.link, name, dir_fd=dir_fd)
            _chown(name, dir_fd, self.owner)
        else:
            self._rewrite(path, dir_fd, name)

    def _rewrite(self, path: tuple[str, ...], dir_fd: int, name: str) -> None:
        source = self._pristine.joinpath(*path)
        info = source.lstat()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            if self.owner is not None:
                os.fchown(out.fileno(), *self.owner)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
            os.utime(out.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))
            assert self._state is not None
            entry = _Entry("file", _key(os.fstat(out.fileno())))
            self._state[path] = entry
            if self._tree is not None:
                self._tree.setdefault(path[:-1], {})[path[-1]] = entry


def empty_dir(path: Path) -> None:
    """Remove everything inside `path` (a scratch area the sandbox can write), following no link."""
    with contextlib.suppress(OSError), open_dir(path, ()) as fd:
        for name in os.listdir(fd):
            with contextlib.suppress(OSError):
                _force_remove(name, fd)


def _special_files(directory: str, names: list[str]) -> list[str]:
    """For `copytree`: the entries that are neither files, directories nor links."""
    skipped = []
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.append(name)
    return skipped


def _force_remove(name: str, dir_fd: int) -> None:
    """Remove a file, link or whole directory tree in `dir_fd`, following no link, even where a test
    took the permissions away (directories are made accessible before they are emptied)."""
    try:
        _remove_entry(name, dir_fd)
        return
    except PermissionError:
        pass
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"cannot remove {name}")
    _chmod_dir(name, 0o700, dir_fd)
    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        for entry in os.listdir(child):
            _force_remove(entry, child)
    finally:
        os.close(child)
    os.rmdir(name, dir_fd=dir_fd)


def _matches(entry: _Entry, info: os.stat_result, name: str, dir_fd: int) -> bool:
    if entry.kind == "dir":
        return stat.S_ISDIR(info.st_mode)
    if entry.kind == "link":
        return stat.S_ISLNK(info.st_mode) and os.readlink(name, dir_fd=dir_fd) == entry.link
    return stat.S_ISREG(info.st_mode) and _key(info) == entry.key
