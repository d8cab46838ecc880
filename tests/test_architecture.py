"""The layers show in the imports: a lower layer never imports a higher one (an AST scan of every
import, those inside functions and TYPE_CHECKING blocks included), the domain is a leaf, the loop
sees Protocols only, and no function is over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ralph", "validators", "router", "sandboxes")

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ralph.domain",),  # plain types and Protocols: the standard library only
    ("sandboxes",),  # where candidate code runs, and the workspace it runs on
    ("validators",),  # the checks, the stages and the verifier
    ("router",),  # routing policies
    (  # the parts the loop is wired from: drafters, edits, git, trace, config, views
        "ralph.drafters",
        "ralph.edits",
        "ralph.context",
        "ralph.redact",
        "ralph.gitops",
        "ralph.branch",
        "ralph.trace",
        "ralph.config",
        "ralph.view",
    ),
    ("ralph.loop",),
    (  # what a command runs: one fix, the hook, the CI bot, reports, benchmarks, the doctor
        "ralph.session",
        "ralph.endings",
        "ralph.clean",
        "ralph.precommit",
        "ralph.ci",
        "ralph.report",
        "ralph.plot",
        "ralph.doctor",
        "ralph.bench",
    ),
    ("ralph.cli", "ralph.__main__"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    return {module_name(f): f for pkg in PACKAGES for f in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = sources()


def layer_of(module: str) -> int:
    if module == "ralph":  # the top package's __init__, which is empty
        return -1
    for i, layer in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in layer):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and README's Layout)")


def imports(module: str, path: Path) -> list[tuple[str, int]]:
    """Every module of ours that `module` imports, with the line."""
    found = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:  # `from ralph import precommit` imports ralph.precommit
                name = f"{base}.{alias.name}"
                found.append((name if name in MODULES else base, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] in PACKAGES]


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_layer_imports_a_higher_one() -> None:
    upward = [
        f"{module}:{line} imports {target}"
        for module, path in MODULES.items()
        for target, line in imports(module, path)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


def test_the_domain_is_a_leaf() -> None:
    reach = [
        f"{module}:{line} imports {target}"
        for module, path in MODULES.items()
        if module.startswith("ralph.domain")
        for target, line in imports(module, path)
        if not target.startswith("ralph.domain")
    ]
    assert not reach, "\n".join(reach)


def test_the_loop_sees_only_the_domain() -> None:
    """The loop imports no concrete class: its collaborators are the domain's Protocols."""
    targets = {t for t, _ in imports("ralph.loop", MODULES["ralph.loop"])}
    assert targets and all(t.startswith("ralph.domain") for t in targets), targets


def test_the_scan_sees_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: a sandboxes module importing the loop is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from ralph.loop import Loop\n    from . import workspace\n")
    found = imports("sandboxes.bad", bad)
    assert ("ralph.loop", 2) in found and ("sandboxes.workspace", 3) in found
    assert layer_of("ralph.loop") > layer_of("sandboxes.bad")


@pytest.mark.parametrize("package", ["ralph.domain", "validators", "router", "sandboxes", "ralph.drafters"])
def test_each_package_says_what_it_holds(package: str) -> None:
    assert ast.get_docstring(ast.parse(MODULES[package].read_text())), f"{package}/__init__.py: no docstring"


def test_no_function_is_over_sixty_lines() -> None:
    long = [
        f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, "\n".join(long)
