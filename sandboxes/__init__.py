"""Isolation mechanisms: where and how a candidate's code is run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.errors import RalphError
from sandboxes.local import LocalSandbox, ProcessResult
from sandboxes.workspace import Workspace

if TYPE_CHECKING:  # ralph.protocols imports this package
    from ralph.protocols import Sandbox

__all__ = ["LocalSandbox", "ProcessResult", "Workspace", "require_sandbox", "select_sandbox"]


def require_sandbox(enabled: bool) -> None:
    """Fail closed, before any work: without bubblewrap ralph refuses unless isolation is off."""
    if not enabled:
        return
    from sandboxes.bwrap import available

    if reason := available():
        raise RalphError(
            f"no sandbox: {reason}; refusing to run untrusted code "
            "(install bubblewrap: apt-get install bubblewrap, or pass --no-sandbox)"
        )


def select_sandbox(
    workspace: Path, writable: Sequence[Path], enabled: bool, *, workspace_writable: bool = True
) -> Sandbox:
    """bubblewrap around the workspace; without it, refuse (fail closed) unless the user turned
    isolation off, in which case rlimits, a new session and timeouts still apply."""
    require_sandbox(enabled)
    if not enabled:
        return LocalSandbox()
    from sandboxes.bwrap import BwrapSandbox

    return BwrapSandbox(workspace, writable=writable, workspace_writable=workspace_writable)
