"""Git plumbing that never touches the user's HEAD, index or working tree.

Every call runs with hooks and fsmonitor disabled: a workspace must never run a program the repo names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ralph.domain.errors import GitError, RalphError
from ralph.sandboxes import hold_owner_lock, remove_owned

# The user's own line-ending settings (core.autocrlf, .gitattributes eol) apply, as in their git: the
# workspace gets the working tree's bytes and commits are normalized as theirs would be.
SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
IDENTITY = {
    "GIT_AUTHOR_NAME": "ralph",
    "GIT_AUTHOR_EMAIL": "ralph@localhost",
    "GIT_COMMITTER_NAME": "ralph",
    "GIT_COMMITTER_EMAIL": "ralph@localhost",
}


def run_git(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    answers: tuple[int, ...] = (0,),
) -> str:
    """Run one git command in `repo` with ralph's safe configuration; raise GitError on failure (an
    exit code not in `answers`: check-ignore's 1, say, means "none", not a failure)."""
    return run_git_bytes(repo, *args, env=env, input=input, answers=answers).decode(errors="replace")


def run_git_bytes(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    answers: tuple[int, ...] = (0,),
) -> bytes:
    """`run_git`, its output as bytes (file contents)."""
    full_env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    proc = subprocess.run(
        ["git", *SAFE_CONFIG, *args], cwd=repo, env=full_env, input=input, capture_output=True, check=False
    )
    if proc.returncode not in answers:
        message = [line for line in proc.stderr.decode(errors="replace").strip().splitlines() if line.strip()]
        # git's first line says what failed (a lock file, say), its last what to do.
        said = " ".join(dict.fromkeys([message[0], message[-1]])) if message else str(proc.returncode)
        raise GitError(f"git {args[0]} failed: {said}", tuple(message))
    return proc.stdout


@dataclass(frozen=True)
class Snapshot:
    """The user's starting state, stored as a commit in their object database (no ref points to it)."""

    toplevel: Path
    head: str | None  # None on an unborn branch
    commit: str  # what the ralph branch builds on (== head when nothing is modified)
    tree: str  # its tree: tracked files as they are, untracked ones only when asked for
    subdir: str  # the project directory, relative to the toplevel ("" for the root)
    work_tree: str = ""  # what the workspace holds: the untracked, not ignored files too
    untracked: tuple[str, ...] = ()  # toplevel-relative: in the workspace, not in the commit

    @property
    def files_tree(self) -> str:
        return self.work_tree or self.tree


def open_repo(path: Path) -> tuple[Path, str]:
    """The toplevel of the git repository containing `path`, and `path` relative to it."""
    if not path.exists():
        raise RalphError(f"{path}: no such directory")
    if not path.is_dir():
        raise RalphError(f"{path}: not a directory")
    try:
        bare = run_git(path, "rev-parse", "--is-bare-repository").strip() == "true"
    except GitError:
        raise RalphError(f"{path}: not a git repository (run `git init` there first)") from None
    try:
        toplevel = Path(run_git(path, "rev-parse", "--show-toplevel").strip()).resolve() if not bare else None
    except GitError:
        toplevel = None  # inside the .git directory
    if toplevel is None or not toplevel.is_dir():
        raise RalphError(f"{path}: no working tree to fix here (a bare repository, or inside .git)")
    subdir = path.resolve().relative_to(toplevel).as_posix()
    return toplevel, "" if subdir == "." else subdir


@contextmanager
def temporary_index(toplevel: Path, seed: bool = False) -> Iterator[dict[str, str]]:
    """An environment whose GIT_INDEX_FILE is a private copy, so the user's index is never written.
    Its directory is locked while in use and emptied lock file last, so a run killed at any point
    leaves it locked by nobody or empty, and the next run's sweep removes it."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ralph-{os.getpid()}-index-"))
    owner = hold_owner_lock(tmp)
    index = tmp / "index"
    try:
        if seed:
            user_index = Path(run_git(toplevel, "rev-parse", "--git-path", "index").strip())
            user_index = user_index if user_index.is_absolute() else toplevel / user_index
            if user_index.exists():
                # Keeps the entries' stat data, so `add -A` rehashes only what changed, and the
                # index's own mtime: git treats an entry as racily clean (and compares contents)
                # when its file changed within the index's timestamp; a fresh mtime would hide that.
                shutil.copy2(user_index, index)
        yield {"GIT_INDEX_FILE": str(index)}
    finally:
        remove_owned(tmp, owner)


_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase (or `git am`)",
    "BISECT_LOG": "a bisect",
}


def check_no_operation_in_progress(toplevel: Path) -> None:
    """Bad input while a merge, rebase, cherry-pick, revert or bisect is under way, or the index has
    unmerged entries: the working tree holds conflict markers or half an operation, not a state to fix."""
    for name, what in _IN_PROGRESS.items():
        marker = Path(run_git(toplevel, "rev-parse", "--git-path", name).strip())
        marker = marker if marker.is_absolute() else toplevel / marker
        if marker.exists():
            raise RalphError(
                f"{what} is in progress in {toplevel}: finish or abort it first (git status says how)"
            )
    unmerged = run_git(toplevel, "ls-files", "--unmerged", "-z")
    if unmerged:
        paths = sorted({entry.split("\t", 1)[-1] for entry in unmerged.split("\0") if entry})
        raise RalphError(
            f"unmerged files in the index ({', '.join(paths[:5])}): resolve the conflicts and `git add` them first"
        )


def snapshot(path: Path, staged: bool = False, include_untracked: bool = False) -> Snapshot:
    """Record the working tree as a commit (tracked files as they are, untracked-not-ignored ones only
    with `include_untracked`; the workspace gets them either way); with `staged`, what the index
    holds instead (what a pre-commit hook is asked about). Ignored files are never in either."""
    toplevel, subdir = open_repo(path)
    check_no_operation_in_progress(toplevel)
    try:
        head: str | None = run_git(toplevel, "rev-parse", "--verify", "-q", "HEAD").strip()
    except GitError:
        head = None
    with temporary_index(toplevel, seed=True) as env:
        if not staged:
            run_git(toplevel, "add", "-u", "--", ".", env=env)
        tree = run_git(toplevel, "write-tree", env=env).strip()
        if not staged:
            run_git(toplevel, "add", "-A", "--", ".", env=env)
        work_tree = run_git(toplevel, "write-tree", env=env).strip()
    untracked: tuple[str, ...] = ()
    if work_tree != tree:
        names = run_git(toplevel, "diff-tree", "-r", "--name-only", "-z", "--no-renames", tree, work_tree)
        untracked = tuple(sorted(p for p in names.split("\0") if p))
    if include_untracked:
        tree, untracked = work_tree, ()
    if head and run_git(toplevel, "rev-parse", f"{head}^{{tree}}").strip() == tree:
        return Snapshot(toplevel, head, head, tree, subdir, work_tree, untracked)
    parents = ["-p", head] if head else []
    commit = run_git(
        toplevel,
        "commit-tree",
        tree,
        *parents,
        "-m",
        f"ralph: snapshot of the {'index' if staged else 'working tree'}",
        env=IDENTITY,
    ).strip()
    return Snapshot(toplevel, head, commit, tree, subdir, work_tree, untracked)


def materialize(snap: Snapshot, dest: Path) -> None:
    """Write the snapshot's files into `dest` (which holds no .git: the workspace is not a repository)."""
    dest.mkdir(parents=True, exist_ok=True)
    with temporary_index(snap.toplevel) as env:
        run_git(snap.toplevel, "read-tree", snap.files_tree, env=env)
        run_git(snap.toplevel, "checkout-index", "-a", "-f", f"--prefix={dest}/", env=env)


def commit_changes(toplevel: Path, parent: str, changes: Mapping[str, bytes | None], message: str) -> str:
    """A new commit on top of `parent` with `changes` (toplevel-relative path -> the file's bytes as
    the working tree has them, None deletes), stored as `git add` would (line endings normalized
    where the user's settings say so)."""
    with temporary_index(toplevel) as env:
        run_git(toplevel, "read-tree", parent, env=env)
        for path, content in changes.items():
            if content is None:
                run_git(toplevel, "update-index", "--force-remove", "--", path, env=env)
                continue
            # As `git add` would store it: the user's line-ending conversion for this path, except
            # where the stored file already has CRs (git's "safer autocrlf" leaves those as they are).
            stored = _blob(toplevel, parent, path)
            keep = ["--no-filters"] if stored is not None and b"\r" in stored else [f"--path={path}"]
            blob = run_git(toplevel, "hash-object", "-w", *keep, "--stdin", input=content).strip()
            mode = _mode(toplevel, parent, path)
            run_git(toplevel, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        tree = run_git(toplevel, "write-tree", env=env).strip()
    return run_git(toplevel, "commit-tree", tree, "-p", parent, "-m", message, env=IDENTITY).strip()


def _blob(toplevel: Path, commit: str, path: str) -> bytes | None:
    try:
        return run_git_bytes(toplevel, "cat-file", "blob", f"{commit}:{path}")
    except GitError:
        return None


def _mode(toplevel: Path, commit: str, path: str) -> str:
    listing = run_git(toplevel, "ls-tree", commit, "--", path).split()
    return listing[0] if listing and listing[0] in ("100644", "100755") else "100644"


def check_branch_name(toplevel: Path, branch: str) -> None:
    """Bad input unless `branch` is a valid, not yet existing branch name."""
    try:
        run_git(toplevel, "check-ref-format", "--branch", branch)
    except GitError:
        raise RalphError(f"--branch {branch!r}: not a valid branch name") from None
    try:
        run_git(toplevel, "rev-parse", "--verify", "-q", f"refs/heads/{branch}")
    except GitError:
        return
    raise RalphError(f"--branch {branch!r}: the branch already exists; pick another name")


def set_branch(toplevel: Path, branch: str, commit: str, old: str | None) -> None:
    """Point `branch` at `commit`, only if it still points at `old` (None: must not exist yet)."""
    expected = old or "0" * 40
    run_git(toplevel, "update-ref", "-m", "ralph", f"refs/heads/{branch}", commit, expected)


def delete_branch(toplevel: Path, branch: str, tip: str) -> None:
    """Delete `branch`, only if it still points at `tip` (nothing moved it since)."""
    run_git(toplevel, "update-ref", "-m", "ralph", "-d", f"refs/heads/{branch}", tip)


def exclude_ralph_dir(toplevel: Path) -> None:
    """Keep `.ralph/` out of `git status` through .git/info/exclude (never through a tracked file)."""
    exclude = Path(run_git(toplevel, "rev-parse", "--git-path", "info/exclude").strip())
    exclude = exclude if exclude.is_absolute() else toplevel / exclude
    text = exclude.read_text() if exclude.exists() else ""
    if "/.ralph/" not in text.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as f:
            f.write(("" if text.endswith("\n") or not text else "\n") + "/.ralph/\n")


def working_bytes(toplevel: Path, commit: str, path: str) -> bytes | None:
    """A file at `commit` as the working tree would hold it (line endings converted as the user's
    settings say), or None when it does not exist there."""
    try:
        return run_git_bytes(toplevel, "cat-file", "--filters", f"{commit}:{path}")
    except GitError:
        return None


def same_as_stored(toplevel: Path, file: Path, treeish: str, path: str) -> bool:
    """Whether the working-tree `file` is what `treeish` stores at `path`, judged as `git status`
    judges it (the file hashed through the user's line-ending conversion)."""
    try:
        stored = run_git(toplevel, "rev-parse", "--verify", "-q", f"{treeish}:{path}").strip()
    except GitError:
        return not file.exists() and not file.is_symlink()
    if not file.is_file() or file.is_symlink():
        return False
    data = file.read_bytes()
    hashes = {run_git(toplevel, "hash-object", f"--path={path}", "--stdin", input=data).strip()}
    hashes.add(run_git(toplevel, "hash-object", "--no-filters", "--stdin", input=data).strip())
    return stored in hashes


def differing_paths(toplevel: Path, old: str, new: str) -> list[str]:
    """Toplevel-relative paths of the files whose content or mode differs between two tree-ishes (a
    rename is a deletion and an addition: both paths)."""
    names = run_git(toplevel, "diff", "--name-only", "--no-renames", "-z", old, new)
    return [p for p in names.split("\0") if p]


def ignored_paths(toplevel: Path, paths: list[str]) -> set[str]:
    """Those of the toplevel-relative `paths` that git's ignore rules cover (.gitignore files,
    info/exclude, core.excludesFile), whether a file is there or not."""
    if not paths:
        return set()
    found = run_git(
        toplevel,
        "check-ignore",
        "--no-index",
        "-z",
        "--stdin",
        input="\0".join(paths).encode() + b"\0",
        answers=(0, 1),  # 1: none of them is ignored
    )
    return {p for p in found.split("\0") if p}
