"""The offline drafter: template-based program repair at the lines the failing checks implicate.

Lint first goes to `ruff check --fix` (and `ruff format` when a failing check asks for it); then single
mutations (operator swaps, comparison flips, off-by-one, negations, substitutions, ...) at the suspicious
lines, most suspicious line first, simplest mutation first.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

from ralph.domain.candidate import Candidate, FileChange, is_protected
from ralph.domain.protocols import DraftContext
from ralph.drafters.mutation_ops import generate_mutants
from ralph.drafters.queue import CandidateQueue
from sandboxes.workspace import read_text_beneath
from validators.toolchain import ruff_bin


class MutationDrafter:
    """Proposes the next untried mutants for the current state; [] when all are spent."""

    name = "mutation"

    def __init__(self) -> None:
        self._queue = CandidateQueue(self._candidates)

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        return self._queue.take(context, n)

    def _candidates(self, context: DraftContext) -> Iterator[Candidate]:
        yield from _lint_fixes(context)
        lines = [(d.path, d.line) for d in context.diagnostics if d.tool == "ruff" and not d.fixable]
        sources: dict[str, str | None] = {}
        for path, line in [*context.suspicious, *lines]:
            if is_protected(path, context.protected) or not path.endswith(".py"):
                continue
            if path not in sources:
                sources[path] = read_text_beneath(context.project, path)
            source = sources[path]
            if source is None:
                continue
            for mutant in generate_mutants(source, [line]):
                yield Candidate(
                    drafter=self.name,
                    description=f"{path}:{mutant.description}",
                    changes=(FileChange(path, source, mutant.source),),
                    meta={"operator": mutant.operator},
                )


def _lint_fixes(context: DraftContext) -> Iterator[Candidate]:
    """`ruff check --fix` over files with fixable diagnostics, `ruff format` when a check wants it."""
    fixable = sorted({d.path for d in context.diagnostics if d.tool == "ruff" and d.fixable})
    wants_format = any("ruff format" in c for c in context.failing_checks)
    commands: list[tuple[str, list[str], list[str]]] = [
        ("ruff --fix", ["check", "--fix-only", "--exit-zero"], fixable)
    ]
    if wants_format:
        commands.append(("ruff format", ["format"], _unformatted(context.project)))
    for label, args, paths in commands:
        changes = []
        for path in paths:
            if is_protected(path, context.protected):
                continue
            before = read_text_beneath(context.project, path)
            if before is None:
                continue
            after = _ruff(context.project, [*args, "--stdin-filename", path, "-"], before)
            if after is not None and after != before:
                changes.append(FileChange(path, before, after))
        if changes:
            yield Candidate("mutation", f"{label} on {', '.join(c.path for c in changes)}", tuple(changes))


def _ruff(project: Path, args: list[str], stdin: str) -> str | None:
    proc = subprocess.run(
        [ruff_bin(), *args], cwd=project, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def _unformatted(project: Path) -> list[str]:
    proc = subprocess.run(
        [ruff_bin(), "format", "--check", "--no-cache", "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    prefix = "Would reformat: "
    return [line[len(prefix) :].strip() for line in proc.stdout.splitlines() if line.startswith(prefix)]
