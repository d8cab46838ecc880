"""The ralph branch in the user's repo: one commit per accepted candidate, on top of the snapshot, while
the run goes; one commit with the whole fix when it ends (`squash`)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from ralph.domain.candidate import FileChange
from ralph.domain.errors import GitError, RalphError, UnsafePath
from ralph.gitops import (
    IDENTITY,
    Snapshot,
    commit_changes,
    differing_paths,
    ignored_paths,
    run_git,
    same_as_stored,
    set_branch,
    working_bytes,
)
from ralph.sandboxes.workspace import (
    as_text,
    encode_like,
    open_dir,
    safe_parts,
    stat_and_read_beneath,
    write_beneath,
)

Encode = Callable[[str, str], bytes]


class RalphBranch:
    """Created at the first accepted candidate; HEAD, the index and the working tree are never touched."""

    def __init__(self, snap: Snapshot, name: str, tip: str | None = None) -> None:
        self.snap = snap
        self.name = name
        self.tip = tip  # None until something was accepted

    def _full(self, path: str) -> str:
        return f"{self.snap.subdir}/{path}" if self.snap.subdir else path

    def prepare(self, changes: Sequence[FileChange], message: str, encode: Encode | None = None) -> str:
        """The commit of these changes on top of the tip, as an object only: no ref moves yet (the
        trace records it first, so the branch is never ahead of the trace). `encode` turns a
        change's text into the file's bytes (the workspace's, which keep its line endings)."""
        parent = self.tip or self.snap.commit
        to_bytes = encode or (lambda _path, text: text.encode("utf-8"))
        files = {self._full(c.path): None if c.after is None else to_bytes(c.path, c.after) for c in changes}
        return commit_changes(self.snap.toplevel, parent, files, message)

    def advance(self, commit: str) -> None:
        """Point the branch at `commit` (made by `prepare`), only if it is still where we left it."""
        try:
            set_branch(self.snap.toplevel, self.name, commit, self.tip)
        except GitError:
            lock = f"refs/heads/{self.name}.lock"
            where = Path(run_git(self.snap.toplevel, "rev-parse", "--git-path", lock).strip())
            if (where if where.is_absolute() else self.snap.toplevel / where).exists():
                raise GitError(
                    f"cannot move branch {self.name}: {lock} exists (another git command, or one that "
                    "crashed); if no git is running, delete it and resume with `ralph fix --resume`"
                ) from None
            raise
        self.tip = commit

    def squash(self, task: str = "") -> str | None:
        """One commit with the branch's whole change on top of the snapshot (the user's HEAD when the
        tree was clean), as an object only (`advance` moves the branch): what `git show` and `git
        merge` of the branch should see. Its message lists the steps. None when nothing was accepted;
        the tip itself when it is the only commit already."""
        if self.tip is None:
            return None
        toplevel, base = self.snap.toplevel, self.snap.commit
        steps = run_git(toplevel, "log", "--reverse", "--format=%s", f"{base}..{self.tip}").splitlines()
        if len(steps) <= 1:
            return self.tip
        fixed = sorted(
            {
                line[2:]
                for line in run_git(toplevel, "log", "--format=%b", f"{base}..{self.tip}").splitlines()
                if line.startswith("- ")
            }
        )
        title = (
            f"ralph: {task.strip().splitlines()[0][:64]}" if task.strip() else f"ralph: {len(steps)} steps"
        )
        body = ["", "Steps:", *(f"- {step.removeprefix('ralph: ')}" for step in steps)]
        body += ["", "Fixed:", *(f"- {item}" for item in fixed)] if fixed else []
        tree = run_git(toplevel, "rev-parse", f"{self.tip}^{{tree}}").strip()
        message = "\n".join([title, *body]) + "\n"
        return run_git(toplevel, "commit-tree", tree, "-p", base, "-m", message, env=IDENTITY).strip()

    def changed_paths(self) -> list[str]:
        """Toplevel-relative paths of the files the branch changed (none before its first commit)."""
        if self.tip is None:
            return []
        return differing_paths(self.snap.toplevel, self.snap.commit, self.tip)

    def apply_scope(self) -> tuple[list[str], list[str]]:
        """What `--apply` writes: the files the branch changed whose content at the tip is not what the
        user had at the start (the workspace's files, untracked ones included); and what it leaves on
        the branch only: new files under a path git ignores (a `.venv/`, `.ralph/`), never the user's."""
        if self.tip is None:
            return [], []
        toplevel = self.snap.toplevel
        changed = set(self.changed_paths()) & set(differing_paths(toplevel, self.snap.files_tree, self.tip))
        had = set(run_git(toplevel, "ls-tree", "-r", "--name-only", "-z", self.snap.files_tree).split("\0"))
        ignored = ignored_paths(toplevel, sorted(changed - had))
        return sorted(changed - ignored), sorted(ignored)

    def apply_to_working_tree(self, notice: Callable[[str], None] = lambda _: None) -> list[str]:
        """Write the branch's changes (`apply_scope`) into the user's working tree (not the index), only
        where the files are still as they were at the snapshot; otherwise change nothing and raise.
        No write or removal goes through a symlink. Returns the paths written."""
        paths, ignored = self.apply_scope()
        if ignored:
            notice(f"--apply left on branch {self.name} only (paths git ignores): {', '.join(ignored)}")
        toplevel = self.snap.toplevel
        # Against the workspace's starting files (untracked ones included), as `git status` judges.
        moved = [p for p in paths if not same_as_stored(toplevel, toplevel / p, self.snap.files_tree, p)]
        if moved:
            raise RalphError(
                f"--apply refused: changed since the run started: {', '.join(moved)} "
                f"(the fix is on branch {self.name})"
            )
        if linked := [p for p in paths if not _reachable(toplevel, p)]:
            raise RalphError(
                f"--apply refused: a symlink on the way to {', '.join(linked)} (the fix is on branch {self.name})"
            )
        for path in paths:
            fixed = working_bytes(toplevel, self.tip or "", path)
            try:
                _write(toplevel, path, fixed)
            except (OSError, UnsafePath) as exc:
                raise RalphError(
                    f"--apply stopped at {path}: {exc} (the fix is on branch {self.name})"
                ) from None
        return paths


def _reachable(root: Path, path: str) -> bool:
    """Whether every folder on the way to `root/path` that exists is a folder, not a symlink."""
    try:
        parts = safe_parts(path)
        with open_dir(root, parts[:-1]):
            return True
    except FileNotFoundError:  # folders to make: the ones there were followed without a link
        return True
    except (OSError, UnsafePath):
        return False


def _write(root: Path, path: str, fixed: bytes | None) -> None:
    """`root/path` made `fixed` (None: removed), with the line endings and mode the user's file has,
    through no symlink."""
    parts = safe_parts(path)
    if fixed is None:
        with contextlib.suppress(FileNotFoundError), open_dir(root, parts[:-1]) as dir_fd:
            os.unlink(parts[-1], dir_fd=dir_fd)
        return
    data, mode = fixed, None
    found = stat_and_read_beneath(root, path)
    if found is not None:  # the fix, with the line endings the user's file has
        info, current = found
        text = as_text(fixed)
        mode = stat.S_IMODE(info.st_mode)
        with contextlib.suppress(UnsafePath):  # mixed line endings in the user's file: git's own conversion
            data = encode_like(text, current) if text is not None else fixed
    write_beneath(root, path, data, mode=mode)
