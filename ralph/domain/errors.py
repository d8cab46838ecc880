"""Exceptions that carry their meaning; the CLI turns them into one line and an exit code."""


class RalphError(Exception):
    """Bad input or an unusable environment: shown as one line, exit code 2."""

    exit_code = 2


class GitError(RalphError):
    """A git operation ralph needed failed; `said` is git's own message, line by line (when known)."""

    def __init__(self, message: str, said: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.said = said


class UnsafePath(ValueError):
    """An edit aimed outside the workspace, into .git, or through a symlink."""
