"""`ast.parse` for the whole process, one tree at a time.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state. Two threads
building trees at once (the verifier's stages run side by side, lanes and the background gate beside
the loop) can make one of them fail with a spurious "SystemError: AST constructor recursion depth
mismatch" (python/cpython#106905): a thread switch inside the constructor, e.g. a finalizer run by
the garbage collector. That failed a semantic stage, and so rejected a correct fix. Every parse in
ralph goes through here, as does griffe's (which parses with `ast.parse` itself: `LOCK`).
"""

from __future__ import annotations

import ast
import threading
from typing import Any

LOCK = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` (a module), under the process-wide lock."""
    with LOCK:
        return ast.parse(source, filename)


def parse_expression(source: str) -> ast.Expression:
    """`ast.parse(source, mode="eval")`, under the process-wide lock."""
    with LOCK:
        return ast.parse(source, mode="eval")


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` (which parses `text`), under the process-wide lock."""
    with LOCK:
        return ast.literal_eval(text)
