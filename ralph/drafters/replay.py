"""Replays edits recorded in a JSONL file, one candidate per line, in order.

Each line is an object with a `description` and one of: `files` ({path: new content}),
`edits` ([{path, search, replace}]), `search_replace` (text in SEARCH/REPLACE blocks) or `diff`
(a unified diff). Used by tests and to reproduce a run.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ralph.domain.candidate import Candidate
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext
from ralph.edits import Format, Reply, SearchReplace, changes_from_reply, read_for_edit


class ReplayDrafter:
    name = "replay"
    remote = False
    priced = True  # (free)

    def __init__(self, path: Path) -> None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError) as exc:
            raise RalphError(f"replay file {path}: {exc}") from None
        self._records: list[dict[str, Any]] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise RalphError(f"replay file {path}: line {number}: not JSON ({exc})") from None
            if problem := _problem(record):
                raise RalphError(f"replay file {path}: line {number}: {problem}")
            self._records.append(record)
        self._next = 0

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        while self._next < len(self._records) and len(out) < n:
            out.append(self._candidate(self._records[self._next], context.project))
            self._next += 1
        return out

    def _candidate(self, record: dict[str, Any], project: Path) -> Candidate:
        """The recorded edit as a candidate. Protected paths are not refused here: a replay reproduces
        what was recorded, hostile edits included, so that the verifier's own defenses are tested."""
        description = str(record.get("description", f"replayed edit {self._next + 1}"))
        reply, formats = _reply(record)
        changes, error = changes_from_reply(reply, functools.partial(read_for_edit, project), formats=formats)
        return Candidate(self.name, description, changes, error=error)


def _reply(record: dict[str, Any]) -> tuple[Reply, tuple[Format, ...]]:
    """The record's edit as `changes_from_reply` takes it, and the format its text is in."""
    if "files" in record:
        return record["files"], ()
    if "edits" in record:
        return [SearchReplace(e["path"], e["search"], e["replace"]) for e in record["edits"]], ()
    if "search_replace" in record:
        return record["search_replace"], ("search-replace",)
    return record["diff"], ("udiff",)


_FORMS = (
    "files ({path: text or null}), edits ([{path, search, replace}]), search_replace (text) or diff (text)"
)


def _problem(record: object) -> str | None:
    """What is wrong with one replay record, for the user (None: it is well formed)."""
    if not isinstance(record, dict):
        return f"a record is a JSON object with one of {_FORMS}, not {type(record).__name__}"
    forms = [k for k in ("files", "edits", "search_replace", "diff") if k in record]
    if len(forms) != 1:
        return f"a record has exactly one of {_FORMS} (found {', '.join(forms) or 'none'})"
    value = record[forms[0]]
    if forms[0] == "files":
        if not isinstance(value, dict) or not all(
            isinstance(p, str) and (c is None or isinstance(c, str)) for p, c in value.items()
        ):
            return "`files` maps paths to new contents (text, or null to delete)"
    elif forms[0] == "edits":
        keys = ("path", "search", "replace")
        if not isinstance(value, list) or not all(
            isinstance(e, dict) and all(isinstance(e.get(k), str) for k in keys) for e in value
        ):
            return "`edits` is a list of objects, each with text `path`, `search` and `replace`"
    elif not isinstance(value, str):
        return f"`{forms[0]}` is text"
    if "description" in record and not isinstance(record["description"], str):
        return "`description` is text"
    return None
