"""The ralph branch in the user's repo: one commit per accepted candidate, on top of the snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ralph.domain.candidate import FileChange
from ralph.domain.errors import GitError, RalphError, UnsafePath
from ralph.gitops import (
    Snapshot,
    commit_changes,
    read_blob,
    run_git,
    same_as_stored,
    set_branch,
    working_bytes,
)
from sandboxes.workspace import as_text, encode_like

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

    def changed_paths(self) -> list[str]:
        """Toplevel-relative paths of the files the branch changed (none before its first commit)."""
        if self.tip is None:
            return []
        names = run_git(self.snap.toplevel, "diff", "--name-only", "-z", self.snap.commit, self.tip)
        return [p for p in names.split("\0") if p]

    def changed(self) -> dict[str, str | None]:
        """Toplevel-relative path -> content at the tip (None: deleted), for files the branch changed."""
        return {p: read_blob(self.snap.toplevel, self.tip or "", p) for p in self.changed_paths()}

    def apply_to_working_tree(self) -> list[str]:
        """Write the branch's changes into the user's working tree (not the index), only where the
        files are still as they were at the snapshot; otherwise change nothing and raise."""
        changed = self.changed()
        # Against the workspace's starting files (untracked ones included), as `git status` judges.
        moved = [
            path
            for path in changed
            if not same_as_stored(self.snap.toplevel, self.snap.toplevel / path, self.snap.files_tree, path)
        ]
        if moved:
            raise RalphError(
                f"--apply refused: changed since the run started: {', '.join(sorted(moved))} "
                f"(the fix is on branch {self.name})"
            )
        for path, content in changed.items():
            target = self.snap.toplevel / path
            data = None
            if content is not None:  # the fix, with the line endings the user's file has
                current = _read(target)
                fixed = working_bytes(self.snap.toplevel, self.tip or "", path)
                text = as_text(fixed) if fixed is not None else None
                try:
                    data = encode_like(text, current) if current is not None and text is not None else fixed
                except UnsafePath:  # mixed line endings in the user's file: git's own conversion
                    data = fixed
            if data is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.ralph-tmp")
                tmp.write_bytes(data)
                if target.exists():
                    tmp.chmod(target.stat().st_mode)
                tmp.replace(target)
        return sorted(changed)


def _read(file: Path) -> bytes | None:
    try:
        return file.read_bytes()
    except FileNotFoundError:
        return None
