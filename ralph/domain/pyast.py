"""`ast.parse` for the whole process, one tree at a time.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state. Two threads
building trees at once (the verifier's stages run side by side, lanes and the background gate beside
the loop) can make one of them fail with a spurious "SystemError: AST constructor recursion depth
mismatch" (python/cpython#106905): a thread switch inside the constructor, e.g. a finalizer run by
the garbage collector. That failed a semantic stage, and so rejected a correct fix. Every parse of
ralph's goes through here, as does griffe's (`LOCK`: it parses with `compile(..., PyCF_ONLY_AST)`).
A parse outside ralph's reach (the standard library's traceback formatting parses a frame's line,
and litellm formats tracebacks in a drafter's thread) can still collide with one of ours: such a
parse is tried again, as a parse changes nothing.
"""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

LOCK = threading.RLock()
# A child forked while another thread held the lock would wait for it forever.
os.register_at_fork(after_in_child=getattr(LOCK, "_at_fork_reinit", lambda: None))

TRIES = 3
_T = TypeVar("_T")


def locked(call: Callable[[], _T]) -> _T:
    """`call()` (which builds trees) under the lock, tried again on the spurious SystemError."""
    with LOCK:
        for _ in range(TRIES - 1):
            try:
                return call()
            except SystemError as exc:
                if "recursion depth mismatch" not in str(exc):
                    raise
        return call()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` (a module), under the process-wide lock."""
    return locked(lambda: ast.parse(source, filename))


def parse_expression(source: str) -> ast.Expression:
    """`ast.parse(source, mode="eval")`, under the process-wide lock."""
    return locked(lambda: ast.parse(source, mode="eval"))


def literal_eval(node_or_text: str | ast.AST) -> Any:
    """`ast.literal_eval` (which parses text), under the process-wide lock."""
    return locked(lambda: ast.literal_eval(node_or_text))
