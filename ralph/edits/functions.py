"""Whole-function replacement: the short prompt text that asks a model for the corrected function, and
the pure parser and applier. A reply's fenced `def` replaces the function of that name (found with
`ast`) in the most suspicious file that defines it; what small models manage to answer with."""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ralph.domain.pyast import parse
from ralph.edits.errors import EditError
from ralph.edits.matching import from_lf, join_lines, leading, split_lines, to_lf
from ralph.edits.paths import missing_file, validate_edit_path

SYSTEM_PROMPT = "You fix bugs in Python code. You answer with code only."
INSTRUCTION = "Write the whole corrected function in one ```python block."


@dataclass(frozen=True)
class FunctionReplacement:
    """Replace the whole definition of function `name` ("func" or "Class.method") in `path`."""

    path: str
    name: str
    source: str  # the full new def, decorators allowed, any indentation


_Def = ast.FunctionDef | ast.AsyncFunctionDef


_CODE_BLOCK_RE = re.compile(r"^```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)^```", re.M | re.S)


def function_blocks(text: str) -> list[tuple[str, str]]:
    """(name, source) of each closed fenced code block in `text` that parses as exactly one top-level
    `def` (decorators allowed), in order. Pure: what `parse_function_blocks` places, and what a
    streamed reply is read for (its first such block is the whole answer to the function prompt)."""
    found = []
    for match in _CODE_BLOCK_RE.finditer(text):
        source = match.group(1)
        try:
            body = parse(source).body
        except SyntaxError:
            continue
        if len(body) == 1 and isinstance(body[0], ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((body[0].name, source))
    return found


def parse_function_blocks(text: str, files: Mapping[str, str]) -> list[FunctionReplacement]:
    """Whole corrected functions in a reply (`function_blocks`), each placed in the first of `files`
    (most suspicious first) that defines a function of that name (an EditError when that file has
    several). What small models answer with when asked for a fix."""
    found: list[FunctionReplacement] = []
    for name, source in function_blocks(text):
        for path, content in files.items():
            try:
                _find_def(parse(content), name, path)
            except SyntaxError:
                continue
            except EditError as err:
                if str(err).startswith(f"no function `{name}`"):
                    continue
                raise  # several definitions of that name here: never another file's by default
            found.append(FunctionReplacement(path, name, source))
            break
    return found


def apply_function_replacement(files: Mapping[str, str], edit: FunctionReplacement) -> dict[str, str]:
    """Replace the definition of `edit.name` (decorators included) by `edit.source`, re-indented.

    The function is found with `ast`: "name" is a module-level function, "Class.method" a method and
    "outer.inner" a nested function; a bare name also finds a method when exactly one has that name.
    """
    path = validate_edit_path(edit.path)
    if path not in files:
        raise EditError(f"{missing_file(path, files)}; can't replace `{edit.name}` in it")
    text, crlf = to_lf(files[path])
    try:
        tree = parse(text)
    except SyntaxError as err:
        raise EditError(
            f"{path} does not parse as Python (line {err.lineno}: {err.msg}), so `{edit.name}` can't be "
            "located by name",
            other_format=True,
        ) from None
    node = _find_def(tree, edit.name, path)
    lines = split_lines(text)
    start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
    end = node.end_lineno or node.lineno
    indent = leading(lines[start])
    def_line = lines[node.lineno - 1].encode()
    tail = lines[end - 1].encode()[node.end_col_offset or 0 :].decode().strip()
    if def_line[: node.col_offset].strip() or (tail and not tail.startswith("#")):
        raise EditError(f"`{edit.name}` in {path} shares a line with other code", other_format=True)
    replacement = [indent + line if line.strip() else "\n" for line in _new_def_lines(edit)]
    result = join_lines(lines[:start] + replacement + lines[end:])
    try:
        parse(result)
    except SyntaxError as err:
        raise EditError(
            f"replacing `{edit.name}` would leave {path} unparsable (line {err.lineno}: {err.msg}); "
            "check the new source's indentation and brackets"
        ) from None
    result = from_lf(result, crlf)
    validate_edit_path(path, content=result)
    return {path: result}


def _find_def(tree: ast.Module, name: str, path: str) -> _Def:
    defs: list[tuple[str, _Def]] = []

    def visit(nodes: Iterable[ast.AST], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, _Def):
                defs.append((prefix + node.name, node))
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            else:
                visit(ast.iter_child_nodes(node), prefix)

    visit(tree.body, "")
    found = [(qualname, node) for qualname, node in defs if qualname == name]
    if not found and "." not in name:
        found = [(qualname, node) for qualname, node in defs if qualname.rsplit(".", 1)[-1] == name]
    if len(found) == 1:
        return found[0][1]
    if found:
        places = ", ".join(f"{qualname} (line {node.lineno})" for qualname, node in found)
        raise EditError(
            f"`{name}` matches {len(found)} definitions in {path}: {places}; give the full name "
            "(Class.method) of one",
            other_format=True,
        )
    close = difflib.get_close_matches(name, [qualname for qualname, _ in defs], n=5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; check the name"
    raise EditError(f"no function `{name}` in {path}{hint}", other_format=not close)


def _new_def_lines(edit: FunctionReplacement) -> list[str]:
    """The new source's lines, dedented and without surrounding blank lines; it must be one def."""
    lines = split_lines(textwrap.dedent(edit.source.replace("\r\n", "\n")))
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if lines:
        lines[-1] = lines[-1].removesuffix("\n") + "\n"
    try:
        module = parse("".join(lines))
    except SyntaxError as err:
        raise EditError(
            f"the new source for `{edit.name}` does not parse (line {err.lineno}: {err.msg}); send the "
            "complete def, decorators included"
        ) from None
    if len(module.body) != 1 or not isinstance(module.body[0], _Def):
        raise EditError(
            f"the new source for `{edit.name}` must be exactly one function definition (decorators "
            "allowed); put other changes in a separate edit"
        )
    return lines
