"""`ralph ci [REPO]`: the CI bot. When a project's checks fail, run the loop, push the fix to a branch
named after the failing commit, write a markdown summary, and optionally open or update a pull request.

Running it twice on the same failure changes nothing the second time: the branch is already there.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.config import RunConfig
from ralph.domain.errors import GitError, RalphError
from ralph.domain.protocols import View
from ralph.gitops import open_repo, run_git
from ralph.redact import redact
from ralph.trace_reader import TracedEnd, TracedStart, read_run


@dataclass
class CiResult:
    exit_code: int
    summary: str
    branch: str | None
    pushed: bool
    pull_request: str | None = None


def ci_branch(repo: Path) -> str:
    """The branch for a fix of the commit being tested: the same failure gets the same branch."""
    head = run_git(repo, "rev-parse", "--short=12", "HEAD").strip()
    return f"ralph/ci-{head}"


def _check_remote(repo: Path, remote: str) -> None:
    """A remote the repository does not have (a URL or a path is not one: git pushes there) is bad
    input, said before any work."""
    remotes = run_git(repo, "remote").split()
    if remote in remotes or "/" in remote or ":" in remote:
        return
    has = f"its remotes: {', '.join(remotes)}" if remotes else "it has none"
    raise RalphError(
        f"no remote {remote!r} in {repo} ({has}): ralph ci pushes the fix branch there; add it with "
        f"`git remote add {remote} URL`, or name another with --remote"
    )


def _remote_has(repo: Path, remote: str, branch: str) -> bool:
    return bool(run_git(repo, "ls-remote", "--heads", remote, f"refs/heads/{branch}").strip())


def run_ci(
    repo: Path, config: RunConfig, *, view: View, remote: str = "origin", pr: bool = False
) -> CiResult:
    """Fix, push, summarize (and open a pull request with `pr`)."""
    from ralph.session import fix

    toplevel, _ = open_repo(repo)
    github = _github_target(toplevel, remote) if pr else None  # bad input fails before any work
    branch = ci_branch(toplevel)
    _check_remote(toplevel, remote)
    try:
        already = _remote_has(toplevel, remote, branch)
    except GitError as exc:
        why = exc.said[0].removeprefix("fatal: ") if exc.said else str(exc)
        raise RalphError(f"remote {remote!r} is not reachable: {why}") from None
    if already:
        summary = f"## ralph\n\nA fix for this commit is already on branch `{branch}`; nothing to do.\n"
        return CiResult(0, summary, branch, pushed=False)
    # A local branch of that name is a leftover of an earlier run whose push was undone: ralph's own.
    run_git(toplevel, "update-ref", "-d", f"refs/heads/{branch}")
    outcome = fix(repo, config, view=view, branch=branch)
    pushed = False
    if outcome.branch:
        run_git(toplevel, "push", remote, f"refs/heads/{branch}:refs/heads/{branch}")
        pushed = True
    summary = markdown_summary(outcome.trace, branch if pushed else None, remote)
    result = CiResult(outcome.exit_code, summary, outcome.branch, pushed)
    if github and pushed:
        result.pull_request = open_pull_request(github, branch, summary)
        result.summary += f"\nPull request: {result.pull_request}\n"
    return result


def markdown_summary(trace: Path, branch: str | None, remote: str) -> str:
    """What failed, what changed (an accept a background gate undid is not on the branch), iterations,
    time, cost and where the trace is."""
    run = read_run(trace)
    start, end = run.start or TracedStart(), run.end or TracedEnd()
    failed = start.baseline_failed
    accepted = [c for it in run.iterations for c in it.kept]
    lines = [f"## ralph: {end.outcome}", ""]
    lines += ["**What failed**", "", *(f"- `{f}`" for f in failed[:20]), ""]
    if accepted:
        lines += [
            "**What was changed**",
            "",
            *(f"- {c.description} ({c.drafter})" for c in accepted),
            "",
        ]
        lines += ["<details><summary>Diff</summary>", "", "```diff", *(c.diff.rstrip() for c in accepted)]
        lines += ["```", "", "</details>", ""]
    else:
        lines += ["No change was accepted.", ""]
    lines += [
        "| iterations | remaining error | wall time | cost |",
        "|---|---|---|---|",
        f"| {len(run.iterations) if end.iterations is None else end.iterations} "
        f"| {end.remaining_at_start} → {end.remaining} | {end.wall_s:.1f} s | ${end.cost_usd:.4f} |",
        "",
        f"Branch: `{branch}` on `{remote}`" if branch else "Nothing was pushed.",
        f"Trace: `{trace}`",
    ]
    return "\n".join(lines) + "\n"


def _slug(repo: Path, remote: str) -> str:
    if slug := os.environ.get("GITHUB_REPOSITORY"):
        return slug
    url = run_git(repo, "remote", "get-url", remote).strip()
    if m := re.search(r"github\.com[:/](?P<slug>[^/]+/[^/]+?)(?:\.git)?$", url):
        return m["slug"]
    raise RalphError(f"--pr: cannot tell the GitHub repository from {remote} (set GITHUB_REPOSITORY)")


def _github(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "ralph-ci",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise RalphError(redact(f"GitHub API {method} {url}: {exc.code} {detail}", [token])) from None
    except urllib.error.URLError as exc:
        raise RalphError(redact(f"GitHub API {method} {url}: {exc.reason}", [token])) from None


@dataclass(frozen=True)
class _GitHub:
    api: str
    slug: str
    token: str


def _github_target(repo: Path, remote: str) -> _GitHub:
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    if not token:
        raise RalphError("--pr needs a token in GITHUB_TOKEN (or GH_TOKEN)")
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    return _GitHub(api, _slug(repo, remote), token)


def open_pull_request(github: _GitHub, branch: str, body: str) -> str:
    """Open a pull request for `branch`, or update the open one; returns its URL."""
    api, slug, token = github.api, github.slug, github.token
    owner = slug.split("/")[0]
    base = os.environ.get("GITHUB_BASE_REF") or os.environ.get("GITHUB_REF_NAME") or "main"
    title = f"ralph: fix failing checks ({branch})"
    existing = _github("GET", f"{api}/repos/{slug}/pulls?head={owner}:{branch}&state=open", token) or []
    if existing:
        number = existing[0]["number"]
        updated = _github(
            "PATCH", f"{api}/repos/{slug}/pulls/{number}", token, {"title": title, "body": body}
        )
        return str(updated.get("html_url", existing[0].get("html_url")))
    created = _github(
        "POST",
        f"{api}/repos/{slug}/pulls",
        token,
        {"title": title, "head": branch, "base": base, "body": body},
    )
    return str(created.get("html_url"))
