"""Writes docs/cli.md from the code: every command of `ralph` with its usage, arguments and options
(from the typer app in ralph/cli.py), and the `[tool.ralph]` keys with their defaults and docstrings
(from ralph/config.py). Run it after changing either:

    python docs/gen_cli.py

tests/test_docs_examples.py fails while docs/cli.md is not what this writes."""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli.md"

HEADER = """# Command-line reference

Generated from the code by `python docs/gen_cli.py` (do not edit by hand): the commands and their
options from ralph/cli.py, the configuration keys from ralph/config.py. The pages beside this one
say what the settings do.
"""


def commands(command: Any, context: Any) -> Iterator[tuple[Any, Any]]:
    """`command` and every visible command below it, depth first, each with its context."""
    yield command, context
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, sub.context_class(sub, info_name=name, parent=context))


def text(plain: str) -> str:
    """Help text as Markdown: what lies outside `code` is escaped (`ralph/<run-id>` is no HTML tag)."""
    parts = plain.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def command_section(command: Any, context: Any) -> str:
    path = context.command_path
    lines = [f"## `{path}`", "", text(inspect.cleandoc(command.help or "")), ""]
    lines += ["```", f"{path} {' '.join(command.collect_usage_pieces(context))}", "```", ""]
    for kind, title in (("argument", "Arguments"), ("option", "Options")):
        records = [
            p.get_help_record(context) for p in command.get_params(context) if p.param_type_name == kind
        ]
        if records := [r for r in records if r is not None]:
            lines += [f"{title}:", ""]
            lines += [f"- `{name}`" + (f": {text(help)}" if help else "") for name, help in records]
            lines.append("")
    return "\n".join(lines)


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right after it in the class body), on one line."""
    source = ast.parse(Path(inspect.getfile(model)).read_text())
    body = next(n for n in ast.walk(source) if isinstance(n, ast.ClassDef) and n.name == model.__name__).body
    docs = {}
    for field, doc in itertools.pairwise(body):
        if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
            continue
        if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            docs[field.target.id] = " ".join(str(doc.value.value).split())
    return docs


def default(model: type[BaseModel], name: str) -> str:
    value = model.model_fields[name].get_default(call_default_factory=True)
    return "not set" if value is None else f"`{json.dumps(value)}`"


def keys_section(table: str, model: type[BaseModel], title: str) -> str:
    lines = [f"### `{table}`", "", title, ""]
    for name, doc in field_docs(model).items():
        lines.append(f"- `{name}` (default {default(model, name)}): {text(doc)}")
    return "\n".join([*lines, ""])


def render() -> str:
    from ralph.cli import app
    from ralph.config import CheckSettings, ModelSettings, RunConfig

    root = typer.main.get_command(app)
    parts = [
        HEADER,
        *(command_section(c, x) for c, x in commands(root, root.context_class(root, info_name="ralph"))),
    ]
    parts += [
        "## Configuration keys",
        "",
        "In `[tool.ralph]` of the project's `pyproject.toml`, or at the top level of a `ralph.toml`;"
        " a flag given on the command line wins over the file.",
        "",
        keys_section("[tool.ralph]", RunConfig, "One `ralph fix` run."),
        keys_section('[tool.ralph.models."PROVIDER/MODEL"]', ModelSettings, ModelSettings.__doc__ or ""),
        keys_section('[tool.ralph.checks."COMMAND"]', CheckSettings, CheckSettings.__doc__ or ""),
    ]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    OUT.write_text(render())
    print(f"wrote {OUT.relative_to(ROOT)}")
