"""Stage 1: compile the changed Python files in process.

A file whose edit changed one function's body is compiled from the accepted state's code with that
function compiled alone (ralph/domain/splice.py): the state's files, and each of their functions
alone, are compiled ahead while the drafter works (validators/read_ahead.py), and kept here by file
name."""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import os
import sys
import time
from pathlib import Path, PurePosixPath
from types import CodeType

from ralph.domain import splice
from ralph.domain.results import Scope, StageResult
from ralph.sandboxes.workspace import stat_and_read_beneath, write_beneath
from ralph.validators.toolchain import Toolchain


class SyntaxValidator:
    """Compiles the changed files. With `write_bytecode` (a workspace whose interpreter reads our
    bytecode), the compiled code is also left where that interpreter's import looks for it, so the
    test process that imports the changed module next does not compile it again."""

    name = "syntax"

    def __init__(self, toolchain: Toolchain, *, write_bytecode: bool = False) -> None:
        self.project = toolchain.project
        self.write_bytecode = write_bytecode

    def learn(self, path: str, text: str) -> None:
        """Compile the accepted state's `path` (its `text`) ahead, for the candidates that edit it."""
        filename = str(self.project / path)
        with contextlib.suppress(SyntaxError, ValueError, MemoryError, RecursionError, SystemError):
            base = splice.compiled(text.encode(), filename)
            _BASES.pop(filename, None)
            while len(_BASES) >= MAX_BASES:  # the oldest learnt goes
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    _BASES.pop(next(iter(_BASES)))
            _BASES[filename] = base
            splice.prepare(base)  # (each body compiled alone too: a candidate compiles only its own)

    def check(self, scope: Scope) -> StageResult:
        start = time.perf_counter()
        paths = [p for p in scope.paths or () if p.endswith(".py")]
        errors: dict[str, str] = {}
        for path in paths:
            file = self.project / path
            found = stat_and_read_beneath(self.project, path)
            if found is None:  # deleted, not a regular file, or reached through a link
                continue
            stat, source = found
            code = _spliced(str(file), source)
            try:
                # optimize=0: the bytecode may serve the tests' imports, asserts included.
                code = code or compile(source, str(file), "exec", dont_inherit=True, optimize=0)
            # Nested too deep or too long to compile counts too: the project's interpreter refuses it.
            except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
                line = getattr(exc, "lineno", None)
                errors[path] = f"{path}:{line}: {exc.__class__.__name__}: {getattr(exc, 'msg', exc)}"
                continue
            if self.write_bytecode:
                write_pyc(self.project, path, code, stat)
        return StageResult(
            stage=self.name,
            ok=not errors,
            duration_ms=(time.perf_counter() - start) * 1000,
            detail="; ".join(errors.values()),
            checked=[("syntax", p) for p in paths],
            syntax_errors=errors,
        )


# The accepted state's files compiled ahead (`learn`), by file name: the last this many learnt.
MAX_BASES = 512
_BASES: dict[str, splice.Compiled] = {}


def _spliced(filename: str, source: bytes) -> CodeType | None:
    """`source` compiled from the state's code where its edit allows (else None: compile it)."""
    base = _BASES.get(filename)
    if base is None:
        return None
    try:
        return splice.spliced(base, source)
    except Exception:  # (never a verdict: the whole text is compiled instead)
        return None


def write_pyc(project: Path, path: str, code: CodeType, stat: os.stat_result) -> None:
    """`code` as the timestamp-checked .pyc of `project/path` (PEP 552), written atomically and
    through no symlink (a `__pycache__` swapped for a link into the user's tree is refused); never
    an error."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return
    source = PurePosixPath(path)
    target = (source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc").as_posix()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    with contextlib.suppress(OSError, ValueError):
        write_beneath(project, target, header + marshal.dumps(code))
