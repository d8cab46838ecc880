"""`ralph clean`: delete the ralph/* branches that repeated runs leave, never an unmerged one unless
asked (`--force`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ralph.domain.errors import GitError
from ralph.gitops import open_repo, run_git


@dataclass(frozen=True)
class RalphBranchInfo:
    name: str
    age_days: float
    merged: bool  # its commits are all in HEAD: deleting it loses nothing


def ralph_branches(toplevel: Path) -> list[RalphBranchInfo]:
    """Every `ralph/*` branch, its age (last commit) and whether HEAD contains it."""
    listing = run_git(
        toplevel, "for-each-ref", "--format=%(refname:short) %(committerdate:unix)", "refs/heads/ralph/"
    )
    head = _head(toplevel)
    merged = (
        set(run_git(toplevel, "branch", "--format=%(refname:short)", "--merged", head).split())
        if head
        else set()
    )
    now = time.time()
    found = []
    for line in listing.splitlines():
        name, _, stamp = line.rpartition(" ")
        found.append(RalphBranchInfo(name, (now - int(stamp or now)) / 86400, name in merged))
    return found


def _head(toplevel: Path) -> str:
    """HEAD's commit, or "" on an unborn branch (then nothing is merged)."""
    try:
        return run_git(toplevel, "rev-parse", "--verify", "-q", "HEAD^{commit}").strip()
    except GitError:
        return ""


def clean(path: Path, *, older_than_days: float | None, force: bool, dry_run: bool) -> list[str]:
    """Delete merged ralph branches (with `older_than_days`, only those older), and unmerged ones
    that old only with `force`; the branch checked out is never deleted. One line per branch."""
    toplevel, _ = open_repo(path)
    current = run_git(toplevel, "branch", "--show-current").strip()
    lines = []
    for branch in ralph_branches(toplevel):
        old_enough = older_than_days is None or branch.age_days >= older_than_days
        if branch.name == current or not old_enough:
            continue
        if not branch.merged and not (force and older_than_days is not None):
            lines.append(f"kept {branch.name}: not merged into HEAD (--older-than DAYS --force deletes it)")
            continue
        if not dry_run:
            run_git(toplevel, "branch", "-D", branch.name)
        state = "merged" if branch.merged else f"unmerged, {branch.age_days:.0f} days old"
        lines.append(f"{'would delete' if dry_run else 'deleted'} {branch.name} ({state})")
    return lines or ["no ralph branches to delete"]
