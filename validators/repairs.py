"""The static step's repair: a candidate whose only objections are new diagnostics that are fixed
safely (ruff's safe fixes, then the project's format of what they made) is amended, not rejected."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ralph.domain.candidate import FileChange
from ralph.domain.errors import UnsafePath
from ralph.domain.results import StageResult
from ralph.sandboxes.workspace import encode_like, read_text_beneath, stat_and_read_beneath, write_beneath
from ralph.validators.format import FormatValidator
from ralph.validators.stages import FORMAT_FIX, RUFF_FIX, Attempt, Step, run_step


@dataclass(frozen=True)
class SafeFixes:
    """`Step.repair` of the static step (whose stages are re-run on the amended edit)."""

    static: Step

    def __call__(self, attempt: Attempt) -> Attempt | None:
        """The attempt with the fixes applied (in the workspace too) and its static stages re-run
        clean; else None."""
        for _round in ("ruff", "format"):
            amended = _amend(attempt)
            if amended is None:
                return None
            attempt = amended
            if run_step(self.static, attempt) is None:
                return attempt
        return None


def _amend(attempt: Attempt) -> Attempt | None:
    """The attempt with its new fixable diagnostics fixed: ruff's first, else the format's."""
    merged, current, tools = attempt.merged, attempt.current, attempt.context.tools
    new = merged.diagnostic_keys() - current.diagnostic_keys()
    fixable = {d.key for ds in merged.diagnostics.values() for d in ds if d.fixable}
    if not new or merged.syntax_errors != current.syntax_errors or set(new) - fixable:
        return None
    if any(s.error is not None for s in attempt.stages):
        return None
    paths = [p for p in attempt.paths if p.endswith((".py", ".pyi"))]
    codes = sorted({k[2] for k in new if k[0] != tools.format.name})
    project = tools.toolchain.project
    if codes:
        if not tools.ruff.enabled or not tools.ruff.fix_only(paths, codes):
            return None
        stage, note = RUFF_FIX, "applied ruff's safe fixes: " + ", ".join(codes)
    else:
        if not _write_formatted(project, tools.format, attempt.candidate.changes, {k[1] for k in new}):
            return None
        stage, note = FORMAT_FIX, f"formatted as the project formats ({tools.format.how})"
    changes = []
    for change in attempt.candidate.changes:
        if change.path not in paths or change.after is None:
            changes.append(change)
            continue
        after = read_text_beneath(project, change.path)
        if after is None:
            return None
        changes.append(FileChange(change.path, change.before, after))
    candidate = replace(attempt.candidate, changes=tuple(changes))
    fixed = Attempt(attempt.context, candidate, current, attempt.reset, progress=attempt.progress)
    fixed.stages = [*attempt.stages, StageResult(stage, ok=True, duration_ms=0.0, detail=note)]
    fixed.amended = True
    return fixed


def _write_formatted(
    project: Path, format: FormatValidator, changes: Sequence[FileChange], paths: set[str]
) -> bool:
    """Write the format stage's text of each of `paths` into the workspace (through no link, in
    the file's own line endings); False when one is missing or the file is not the one checked."""
    for change in changes:
        if change.path not in paths:
            continue
        text = format.formatted.get((change.path, change.after or ""))
        found = stat_and_read_beneath(project, change.path)
        if text is None or found is None:
            return False
        try:
            data = encode_like(text, found[1])
        except UnsafePath:
            return False
        write_beneath(project, change.path, data, mode=found[0].st_mode & 0o7777)
    return True
