"""Lines and matching, shared by the formats that locate text in a file (SEARCH/REPLACE, unified
diffs, whole functions): splitting at "\\n" only, keeping CRLF files CRLF, and finding the one place a
pattern matches, exactly, else whitespace-tolerantly, with a "did you mean" for the model otherwise."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n"; unlike str.splitlines, only "\\n" ends a line, as for Python and git."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    return lines


def join_lines(lines: Sequence[str]) -> str:
    """Concatenate lines, adding the newline a line lacks when it no longer ends the file."""
    last = len(lines) - 1
    return "".join(line if i == last or line.endswith("\n") else line + "\n" for i, line in enumerate(lines))


def to_lf(text: str) -> tuple[str, bool]:
    """The text with "\\n" newlines, and whether it used CRLF throughout (to restore it afterwards)."""
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        return text.replace("\r\n", "\n"), True
    return text, False


def from_lf(text: str, crlf: bool) -> str:
    return text.replace("\n", "\r\n") if crlf else text


@dataclass(frozen=True)
class Indent:
    """How a whitespace-tolerant match is indented: the file has `add` more, or `remove` less."""

    add: str = ""
    remove: str = ""

    def fix(self, line: str) -> str:
        """Indent a replacement line the way the matched file lines are indented."""
        if not line.strip():
            return line
        if self.add:
            return self.add + line
        if self.remove:
            return line[len(self.remove) :] if line.startswith(self.remove) else line.lstrip(" \t")
        return line


_SAME_INDENT = Indent()


def leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _loose_indent(lines: Sequence[str], start: int, pattern: Sequence[str]) -> Indent | None:
    """How `pattern` is indented if it matches at `start` up to indentation and trailing whitespace."""
    indent: Indent | None = None
    for offset, want in enumerate(pattern):
        have, want = lines[start + offset].rstrip(), want.rstrip()
        if not have or not want:
            if have or want:
                return None
            continue
        have_indent, want_indent = leading(have), leading(want)
        if have[len(have_indent) :] != want[len(want_indent) :]:
            return None
        if indent is None:
            if have_indent.endswith(want_indent):
                indent = Indent(add=have_indent[: len(have_indent) - len(want_indent)])
            elif want_indent.endswith(have_indent):
                indent = Indent(remove=want_indent[: len(want_indent) - len(have_indent)])
            else:
                return None
        if indent.add + want_indent != indent.remove + have_indent:
            return None
    return indent or _SAME_INDENT


def matches(lines: Sequence[str], pattern: Sequence[str], lo: int, loose: bool) -> list[tuple[int, Indent]]:
    """Every start index >= lo where `pattern` matches, exactly or (loose) whitespace-tolerantly."""
    starts = range(lo, len(lines) - len(pattern) + 1)
    if loose:
        found = ((start, _loose_indent(lines, start, pattern)) for start in starts)
        return [(start, indent) for start, indent in found if indent is not None]
    keys = [line.removesuffix("\n") for line in pattern]
    have = [line.removesuffix("\n") for line in lines]
    return [
        (start, _SAME_INDENT)
        for start in starts
        if have[start] == keys[0] and have[start : start + len(keys)] == keys
    ]


class NoUniqueMatch(Exception):
    """The pattern matched zero or several places; `starts` lists the several (0-based)."""

    def __init__(self, starts: list[int]) -> None:
        super().__init__(starts)
        self.starts = starts


def locate(
    lines: Sequence[str], pattern: Sequence[str], *, lo: int = 0, hint: int | None = None
) -> tuple[int, Indent]:
    """The one place `pattern` matches: exactly, else whitespace-tolerantly.

    Among several matches, the one starting exactly at `hint` wins: a diff tool's line numbers are right,
    and a model's wrong ones are unlikely to land exactly on one of the candidates.
    """
    for loose in (False, True):
        found = matches(lines, pattern, lo, loose)
        if len(found) == 1:
            return found[0]
        for start, indent in found:
            if start == hint:
                return start, indent
        if found:
            raise NoUniqueMatch([start for start, _ in found])
    raise NoUniqueMatch([])


_FULL_SCAN_LINES = 20_000  # window lines `_closest` compares one by one before it needs anchors
_CHAR_COMPARE_LINES = 40  # longer patterns are compared line by line: by character is quadratic


def _closest(lines: Sequence[str], pattern: Sequence[str]) -> tuple[int, int] | None:
    """The span of `lines` most similar to `pattern`, if any is reasonably similar."""
    if not lines or not pattern:
        return None
    size = min(len(pattern), len(lines))
    last = len(lines) - size
    wanted = [line.strip() for line in pattern]
    starts: Iterable[int] = range(last + 1)
    if (last + 1) * size > _FULL_SCAN_LINES:
        # Comparing every window of a big file takes seconds, so only windows that line up with a line
        # the pattern has verbatim are compared.
        offsets: dict[str, list[int]] = {}
        for offset, text in enumerate(wanted):
            if text:
                offsets.setdefault(text, []).append(offset)
        hits: Counter[int] = Counter()
        for index, line in enumerate(lines):
            for offset in offsets.get(line.strip(), ()):
                hits[min(max(index - offset, 0), last)] += 1
        starts = [start for start, _ in hits.most_common(50)]

    def comparable(texts: list[str]) -> Sequence[str]:
        return texts if size > _CHAR_COMPARE_LINES else "\n".join(texts)

    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(comparable(wanted))
    best_ratio, best_start = 0.6, None
    for start in starts:
        matcher.set_seq1(comparable([line.strip() for line in lines[start : start + size]]))
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best_ratio, best_start = ratio, start
    return None if best_start is None else (best_start, best_start + size)


def did_you_mean(lines: Sequence[str], pattern: Sequence[str]) -> str:
    span = _closest(lines, pattern)
    if span is None:
        return "\nNo similar lines were found; re-read the file and copy the lines exactly."
    start, end = span
    shown = join_lines(lines[start : min(end, start + 50)]).rstrip("\n")
    return f"\nDid you mean these lines ({start + 1}-{end})?\n```\n{shown}\n```"


def line_list(starts: list[int]) -> str:
    listed = ", ".join(str(start + 1) for start in starts[:5])
    return listed + (", ..." if len(starts) > 5 else "")


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
