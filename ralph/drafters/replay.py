"""Replays edits recorded in a JSONL file, one candidate per line, in order.

Each line is an object with a `description` and one of: `files` ({path: new content}),
`edits` ([{path, search, replace}]), `search_replace` (text in SEARCH/REPLACE blocks) or `diff`
(a unified diff). Used by tests and to reproduce a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ralph.candidate import Candidate, FileChange
from ralph.edits import (
    EditError,
    SearchReplace,
    apply_search_replace,
    apply_unified_diff,
    parse_search_replace,
    parse_unified_diff,
    read_for_edit,
    validate_edit_path,
)
from ralph.errors import RalphError
from ralph.protocols import DraftContext


class ReplayDrafter:
    name = "replay"

    def __init__(self, path: Path) -> None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            self._records: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError) as exc:
            raise RalphError(f"replay file {path}: {exc}") from None
        self._next = 0

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        while self._next < len(self._records) and len(out) < n:
            out.append(self._candidate(self._records[self._next], context.project))
            self._next += 1
        return out

    def _candidate(self, record: dict[str, Any], project: Path) -> Candidate:
        description = str(record.get("description", f"replayed edit {self._next + 1}"))
        try:
            new = _new_contents(record, project)
            paths = sorted(new)
            current = {p: _read(project, p) for p in paths}
            changes = tuple(FileChange(p, current[p], new[p]) for p in paths if current[p] != new[p])
        except EditError as exc:
            return Candidate(self.name, description, (), error=str(exc))
        return Candidate(self.name, description, changes)


def _read(project: Path, path: str) -> str | None:
    try:
        return read_for_edit(project, path)
    except EditError:
        if validate_edit_path(path) and (project / path).is_dir():
            return None
        raise


def _new_contents(record: dict[str, Any], project: Path) -> dict[str, str | None]:
    if "files" in record:
        return {validate_edit_path(p): c for p, c in record["files"].items()}
    if "edits" in record:
        edits = [SearchReplace(e["path"], e["search"], e["replace"]) for e in record["edits"]]
    elif "search_replace" in record:
        edits = parse_search_replace(record["search_replace"])
    elif "diff" in record:
        patches = parse_unified_diff(record["diff"])
        touched = {p for patch in patches for p in (patch.path, patch.old_path) if p}
        return apply_unified_diff({p: c for p in touched if (c := _read(project, p)) is not None}, patches)
    else:
        raise EditError("a replay record needs one of: files, edits, search_replace, diff")
    files = {e.path: c for e in edits if (c := _read(project, e.path)) is not None}
    return dict(apply_search_replace(files, edits))
