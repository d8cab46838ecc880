"""From a model's reply to file changes: the one place every drafter turns a reply into FileChanges.

Every path an edit touches is checked here, before any file is read: relative, inside the project,
outside `.git`, not protected. Reading is the caller's `read`, so this stays a pure function of the
reply and the files it is given, tested with plain strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from ralph.domain.candidate import FileChange, is_protected
from ralph.edits.errors import EditError
from ralph.edits.functions import (
    INSTRUCTION,
    apply_function_replacement,
    function_blocks,
    parse_function_blocks,
)
from ralph.edits.paths import validate_edit_path
from ralph.edits.search_replace import (
    BLOCK_FORMAT,
    SearchReplace,
    apply_search_replace,
    parse_search_replace,
)
from ralph.edits.udiff import DIFF_FORMAT, apply_unified_diff, parse_unified_diff

Format = Literal["search-replace", "udiff", "function"]
FORMATS: tuple[Format, ...] = ("search-replace", "udiff", "function")
_NAMES: dict[Format, str] = {
    "search-replace": "SEARCH/REPLACE blocks",
    "udiff": "unified diff",
    "function": "corrected whole function",
}

# What a reply is: a model's text, or (replayed) SEARCH/REPLACE edits already split, or new contents by
# path (None deletes the file).
Reply = str | Sequence[SearchReplace] | Mapping[str, str | None]
Read = Callable[[str], str | None]
_Contents = tuple[dict[str, str | None], dict[str, str | None]]

NOTHING_CHANGES = "the edit leaves every file as it is; change the code so that the failing checks pass"


def changes_from_reply(
    reply: Reply,
    read: Read,
    *,
    formats: Sequence[Format] = FORMATS,
    protected: Iterable[str] = (),
    suspicious: Sequence[str] = (),
    asked: Format | None = None,
) -> tuple[tuple[FileChange, ...], str | None]:
    """The file changes a reply makes, or () and an error written for the model.

    A text reply is read in the first of `formats` it holds: SEARCH/REPLACE blocks, else a unified
    diff, else corrected whole functions, each placed in the first of the `suspicious` files (most
    suspicious first, protected ones skipped) that defines a function of its name. `read(path)` is a
    file's current text (None: no such file; EditError: a file an edit may not use); it only ever sees
    paths checked here first, none of them matching the `protected` globs. A reply is used whole or
    not at all, and one that changes nothing is an error too. An error's advice on how to answer is
    in `asked`, the format the prompt asked for (default: the first of `formats`): a model shown only
    the function prompt is never told to use SEARCH/REPLACE blocks it was never taught (with no
    `formats`, a replayed edit's error speaks SEARCH/REPLACE).
    """
    try:
        before, after = _contents(reply, read, formats, tuple(protected), suspicious)
    except EditError as err:
        return (), _for_model(err, asked or (formats[0] if formats else "search-replace"))
    changes = tuple(
        FileChange(path, before.get(path), after[path])
        for path in sorted(after)
        if before.get(path) != after[path]
    )
    return (changes, None) if changes else ((), NOTHING_CHANGES)


def _contents(
    reply: Reply, read: Read, formats: Sequence[Format], protected: tuple[str, ...], suspicious: Sequence[str]
) -> _Contents:
    """The current and new contents of every file the reply touches; EditError when it can't apply."""
    if isinstance(reply, Mapping):
        new = {validate_edit_path(p, content=c): c for p, c in reply.items()}
        return _current(new, read, protected), new
    if not isinstance(reply, str):
        return _search_replace(reply, read, protected)
    if "search-replace" in formats and (edits := parse_search_replace(reply)):
        return _search_replace(edits, read, protected)
    if "udiff" in formats and (patches := parse_unified_diff(reply)):
        current = _current(
            [p for patch in patches for p in (patch.path, patch.old_path) if p], read, protected
        )
        return current, apply_unified_diff(_existing(current), patches)
    if "function" in formats:
        return _whole_functions(reply, read, formats, protected, suspicious)
    raise _NoEdit(formats)


def _search_replace(edits: Sequence[SearchReplace], read: Read, protected: tuple[str, ...]) -> _Contents:
    current = _current([edit.path for edit in edits], read, protected)
    return current, dict(apply_search_replace(_existing(current), edits))


def _whole_functions(
    reply: str, read: Read, formats: Sequence[Format], protected: tuple[str, ...], suspicious: Sequence[str]
) -> _Contents:
    """Corrected whole functions, each replacing the function of its name in the most suspicious file
    that has one (protected files are never candidates), all of them one edit. A function no such
    file defines makes the whole reply an error (the others would call or pair with code that is not
    there), except a test shown back (`test...`), which is no edit."""
    paths = [p for p in dict.fromkeys(suspicious) if not is_protected(p, protected)]
    current = _existing(_current(paths, read, protected))
    replacements = parse_function_blocks(reply, current)
    if not replacements:
        raise _NoEdit(formats)
    placed = {edit.name for edit in replacements}
    lost = [n for n, _ in function_blocks(reply) if n not in placed and not n.startswith("test")]
    if lost:
        where = ", ".join(current) or "the suspicious files"
        raise EditError(
            f"no function `{lost[0]}` in {where}: each function of the reply replaces the one of its "
            "name, and a reply is used whole or not at all; send only the functions you corrected, "
            "under their names in the code"
        )
    files = dict(current)
    for edit in replacements:
        files.update(apply_function_replacement(files, edit))
    return dict[str, str | None](current), dict[str, str | None](files)


def _current(paths: Iterable[str], read: Read, protected: tuple[str, ...]) -> dict[str, str | None]:
    """The current text of each path (None: no such file), once every path is known to be one an
    edit may touch: inside the project, outside .git, not protected."""
    checked = list(dict.fromkeys(validate_edit_path(path) for path in paths))
    refused = [path for path in checked if is_protected(path, protected)]
    if refused:
        verb = "is" if len(refused) == 1 else "are"
        raise EditError(
            f"{', '.join(refused)} {verb} protected (tests and other protected files must not be edited); "
            "change the code under test instead"
        )
    return {path: read(path) for path in checked}


def _existing(current: Mapping[str, str | None]) -> dict[str, str]:
    return {path: text for path, text in current.items() if text is not None}


class _NoEdit(EditError):
    """A reply without an edit in any of the formats read (`_for_model` words it for the format asked)."""

    def __init__(self, formats: Sequence[Format]) -> None:
        super().__init__(_no_edit(formats))
        self.formats = tuple(formats)


def _no_edit(formats: Sequence[Format]) -> str:
    return f"the reply contains no edit (no {', no '.join(_NAMES[f] for f in formats)})"


def _how(asked: Format) -> str:
    """How to answer in the format the prompt asked for."""
    if asked == "function":
        return INSTRUCTION
    if asked == "udiff":
        return f"Answer with a unified diff: {DIFF_FORMAT}"
    return f"Answer with SEARCH/REPLACE blocks, each written as:\n{BLOCK_FORMAT}"


def _for_model(err: EditError, asked: Format) -> str:
    """The error as the model reads it, its advice in the format it was asked for."""
    message = str(err)
    if isinstance(err, _NoEdit):
        # Only the format asked for is named to a model asked for whole functions.
        return f"{_no_edit(('function',) if asked == 'function' else err.formats)}. {_how(asked)}"
    if err.other_format and asked != "function":
        return f"{message}; use {'a unified diff' if asked == 'udiff' else 'a SEARCH/REPLACE edit'} instead"
    if err.partial is not None:
        # apply_search_replace ends with "N other blocks applied fine; don't resend them", which holds in
        # a chat; here a reply is kept whole or not at all, so the next reply must carry them again.
        message = message.rsplit("\n\n", 1)[0] + (
            "\n\nThe other blocks applied, but a reply is only used when all of it applies: send every "
            "block again, with these fixed."
        )
    return message
