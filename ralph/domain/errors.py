"""Exceptions that carry their meaning; the CLI turns them into one line and an exit code."""


class RalphError(Exception):
    """Bad input or an unusable environment: shown as one line, exit code 2."""

    exit_code = 2


class GitError(RalphError):
    """A git operation ralph needed failed."""


class UnsafePath(ValueError):
    """An edit aimed outside the workspace, into .git, or through a symlink."""
