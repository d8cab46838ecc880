"""Isolation mechanisms: where and how a candidate's code is run."""

from sandboxes.local import LocalSandbox, ProcessResult
from sandboxes.workspace import Workspace

__all__ = ["LocalSandbox", "ProcessResult", "Workspace"]
