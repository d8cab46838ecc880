"""Unified diffs (git's or any diff tool's, as models write them): the pure parser and applier, and
the line that names the format in an error. No prompt asks for diffs; a chat reply may answer with one.
Hunks are recounted before parsing (models miscount), and each is placed where its context matches
exactly one place; its line number only settles a tie."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import unidiff
from unidiff.errors import UnidiffParseError

from ralph.edits.errors import EditError
from ralph.edits.matching import (
    NoUniqueMatch,
    did_you_mean,
    from_lf,
    join_lines,
    line_list,
    locate,
    split_lines,
    to_lf,
)
from ralph.edits.paths import check_text_size, missing_file, validate_edit_path

DIFF_FORMAT = "start each file with '--- a/path' and '+++ b/path' lines, followed by its @@ hunks"

_Tag = Literal[" ", "-", "+"]
_TAGS: dict[str, _Tag] = {" ": " ", "-": "-", "+": "+"}


@dataclass(frozen=True)
class Hunk:
    """One `@@` hunk: (tag, line) pairs, tag in " -+"; a line lacks its newline at end of file."""

    old_start: int | None  # line number from the @@ header, only a hint; None for a bare "@@"
    lines: tuple[tuple[_Tag, str], ...]


@dataclass(frozen=True)
class FilePatch:
    """The changes a unified diff makes to one file."""

    path: str  # target path (new path for renames), POSIX relative; the deleted path for deletions
    old_path: str | None  # None for a new file
    hunks: tuple[Hunk, ...]
    is_delete: bool
    is_binary: bool  # only ever true for deletions: other binary changes are rejected when parsing


_HUNK_HEADER_RE = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")
_INDEX_RE = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+")
_HEADER_PREFIXES = (
    "diff --git ",
    "new file mode ",
    "deleted file mode ",
    "old mode ",
    "new mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "--- ",
    "+++ ",
    "Binary files ",
    "GIT binary patch",
)
_DEV_NULL = "/dev/null"


# A git header giving a path the symlink (120000) or submodule (160000) mode.
_LINK_MODE = re.compile(r"^(?:new file|deleted file|new|old) mode 1[26]0000\s*$", re.MULTILINE)


def parse_unified_diff(text: str) -> list[FilePatch]:
    """The per-file patches of a unified diff in a model's reply (git-style a/ b/ prefixes stripped).

    Chatter and fences around and between file sections are dropped, and every hunk is recounted
    before unidiff parses it, so the wrong line counts models tend to write do not matter. Raises
    EditError for binary changes (other than deletions), copies, and diffs that still do not parse.
    """
    check_text_size(text)
    if _LINK_MODE.search(text):
        raise EditError(
            "symlinks and submodules cannot be created or changed by an edit; edit regular files only"
        )
    canonical, hints = _canonical_diff(text.replace("\r\n", "\n").split("\n"))
    if not canonical:
        return []
    try:
        patch_set = unidiff.PatchSet(canonical)
    except UnidiffParseError as err:
        raise EditError(f"the diff could not be parsed ({err}); {DIFF_FORMAT}") from None
    hint_iter = iter(hints)
    return [_file_patch(patched, hint_iter) for patched in patch_set]


def _canonical_diff(lines: list[str]) -> tuple[str, list[int | None]]:
    """Header and hunk lines only, with recounted @@ headers; plus each hunk's line-number hint."""
    out: list[str] = []
    hints: list[int | None] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@"):
            body, i = _hunk_body(lines, i + 1)
            old = sum(1 for row in body if row[:1] in ("", " ", "-"))
            new = sum(1 for row in body if row[:1] in ("", " ", "+"))
            if not old and not new:
                continue
            header = _HUNK_HEADER_RE.match(line)
            hint = int(header[1]) if header else None
            start = hint if hint is not None else int(old > 0)
            new_start = int(header[2]) if header else int(new > 0)
            section = header[3] if header else ""
            out.append(f"@@ -{start},{old} +{new_start},{new} @@{section}\n")
            out.extend((row or " ") + "\n" for row in body)
            hints.append(hint)
            continue
        if line.startswith("copy from "):
            raise EditError(
                "the diff copies a file, which is not supported; create the new file with its full contents"
            )
        if line.startswith(_HEADER_PREFIXES) or _INDEX_RE.match(line):
            out.append(line + "\n")
        i += 1
    return "".join(out), hints


def _hunk_body(lines: list[str], i: int) -> tuple[list[str], int]:
    """The body of the hunk starting at line i, judged by line prefixes instead of the header's counts."""
    body: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            break
        # Models drop the space of blank context lines, so an empty line is context.
        if not line or line[0] in " +-" or line.startswith("\\ "):
            body.append(line)
            i += 1
        else:
            break
    # Blank lines at the end separate the hunk from what follows more often than they are context.
    while body and not body[-1]:
        body.pop()
    return body, i


def _file_patch(patched: unidiff.PatchedFile, hints: Iterator[int | None]) -> FilePatch:
    source, target = patched.source_file, patched.target_file
    if source == _DEV_NULL and target == _DEV_NULL:
        raise EditError("the diff has a file with /dev/null on both the --- and +++ lines; name the file")
    git_style = (source == _DEV_NULL or source.startswith("a/")) and (
        target == _DEV_NULL or target.startswith("b/")
    )
    old = None if source == _DEV_NULL else validate_edit_path(source[2:] if git_style else source)
    new = None if target == _DEV_NULL else validate_edit_path(target[2:] if git_style else target)
    if patched.is_binary_file and new is not None:
        raise EditError(
            f"{new}: binary changes are not supported; only text files can be edited (deleting is fine)"
        )
    hunks = tuple(_hunk(hunk, next(hints)) for hunk in patched)
    path = new if new is not None else old
    assert path is not None  # both /dev/null was rejected above
    return FilePatch(
        path=path, old_path=old, hunks=hunks, is_delete=new is None, is_binary=patched.is_binary_file
    )


def _hunk(hunk: unidiff.Hunk, hint: int | None) -> Hunk:
    lines: list[tuple[_Tag, str]] = []
    for line in hunk:
        if line.line_type == "\\" and lines:
            lines[-1] = (lines[-1][0], lines[-1][1].removesuffix("\n"))
        elif line.line_type in _TAGS:
            lines.append((_TAGS[line.line_type], line.value))
    return Hunk(old_start=hint, lines=tuple(lines))


def apply_unified_diff(files: Mapping[str, str], patches: Sequence[FilePatch]) -> dict[str, str | None]:
    """Apply the patches and return the new contents of every touched path (None: deleted).

    Each hunk is placed where its context and removed lines match exactly one place, exactly or else
    whitespace-tolerantly; its line number only settles a tie when it points exactly at one of the
    candidates. All failures are reported together and nothing is applied then.
    """
    state: dict[str, str | None] = {}
    failures: list[str] = []

    def current(path: str) -> str | None:
        return state[path] if path in state else files.get(path)

    for patch in patches:
        path = validate_edit_path(patch.path)
        old = None if patch.old_path is None else validate_edit_path(patch.old_path)
        if patch.is_delete:
            # A binary file's contents may be absent from `files`; deleting it needs none.
            if current(path) is None and not patch.is_binary:
                failures.append(f"the diff deletes {missing_file(path, files)}")
            else:
                state[path] = None
            continue
        if old is None:
            existing = current(path)
            if existing is not None and existing.strip():
                failures.append(
                    f"the diff creates {path} (from /dev/null), but it already exists; diff against its "
                    "current contents instead"
                )
                continue
            state[path] = join_lines([text for hunk in patch.hunks for tag, text in hunk.lines if tag != "-"])
            continue
        source = current(old)
        if source is None:
            failures.append(
                f"the diff changes {missing_file(old, files)}; use --- /dev/null to create a file"
            )
            continue
        if old != path and current(path) is not None:
            failures.append(f"the diff renames {old} to {path}, but {path} already exists")
            continue
        text, crlf = to_lf(source)
        lines, errors = _apply_hunks(path, split_lines(text), patch.hunks)
        if errors:
            failures.extend(errors)
            continue
        if old != path:
            state[old] = None
        state[path] = from_lf(join_lines(lines), crlf)
    if failures:
        raise EditError(
            "\n\n".join(failures) + "\n\nNothing from this diff was applied; resend the whole diff with "
            "these problems fixed."
        )
    for path, content in state.items():
        if content is not None:
            validate_edit_path(path, content=content)
    return state


def _apply_hunks(path: str, lines: list[str], hunks: Sequence[Hunk]) -> tuple[list[str], list[str]]:
    """The lines after applying every hunk that can be placed, and a message per hunk that cannot."""
    out = list(lines)
    shift = 0  # how far earlier hunks moved the lines later hunks' line numbers refer to
    errors: list[str] = []
    for number, hunk in enumerate(hunks, 1):
        label = f"hunk {number} of {len(hunks)} for {path}" if len(hunks) > 1 else f"the hunk for {path}"
        old = [text for tag, text in hunk.lines if tag != "+"]
        if not old:
            added = [text for tag, text in hunk.lines if tag == "+"]
            if hunk.old_start is None and out:
                errors.append(
                    f"{label} has no context or '-' lines, so nothing says where it goes; include a few "
                    "unchanged lines around the change"
                )
                continue
            at = 0 if hunk.old_start is None else hunk.old_start + shift
            if at > len(out):
                errors.append(
                    f"{label} inserts after line {hunk.old_start}, but {path} has only {len(out)} lines"
                )
                continue
            out[at:at] = added
            shift += len(added)
            continue
        hint = None if hunk.old_start is None else hunk.old_start - 1 + shift
        try:
            start, indent = locate(out, old, hint=hint)
        except NoUniqueMatch as err:
            errors.append(_describe_hunk_failure(label, out, old, err))
            continue
        new: list[str] = []
        at = start
        for tag, text in hunk.lines:
            if tag == "+":
                new.append(indent.fix(text))
                continue
            if tag == " ":
                new.append(out[at])  # the file's own line: it may differ from the hunk's in whitespace
            at += 1
        out[start : start + len(old)] = new
        shift += len(new) - len(old)
    return out, errors


def _describe_hunk_failure(label: str, lines: list[str], old: list[str], err: NoUniqueMatch) -> str:
    if err.starts:
        return (
            f"{label} matched {len(err.starts)} places (lines {line_list(err.starts)}); add more unchanged "
            "context lines so it matches exactly one place"
        )
    return (
        f"{label} (starting {old[0].rstrip()!r}) matched 0 times: its context (' ') and removed ('-') "
        f"lines must be a copy of lines in the current file.{did_you_mean(lines, old)}"
    )
