"""The layers show in the imports: a lower layer never imports a higher one (an AST scan of every
import, those inside functions and TYPE_CHECKING blocks included), the domain is a leaf, the loop
sees Protocols only, and no function is over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# ralph's own folders, each with the package it installs as: the three beside ralph/ are mapped under
# `ralph.` (links in ralph/ in the checkout, files in the wheel), so ralph adds one import name.
FOLDERS = {
    "ralph": "ralph",
    "validators": "ralph.validators",
    "router": "ralph.router",
    "sandboxes": "ralph.sandboxes",
}
MAPPED = ("validators", "router", "sandboxes")

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ralph.domain",),  # plain types and Protocols: the standard library only
    ("ralph.sandboxes",),  # where candidate code runs, and the workspace it runs on
    ("ralph.validators",),  # the checks, the stages and the verifier
    ("ralph.router",),  # routing policies
    (  # the parts the loop is wired from: drafters, edits, git, trace, config, views
        "ralph.drafters",
        "ralph.edits",
        "ralph.context",
        "ralph.redact",
        "ralph.gitops",
        "ralph.branch",
        "ralph.trace",
        "ralph.trace_reader",
        "ralph.config",
        "ralph.view",
    ),
    # the loop's own parts, on the domain only: memory, drafting, lanes, provisional states, records
    ("ralph.memory", "ralph.records", "ralph.drafting", "ralph.lanes", "ralph.provisional"),
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
    return ".".join([FOLDERS[parts[0]], *parts[1:]])


def sources() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for f in sorted((ROOT / folder).rglob("*.py")):
            if folder == "ralph" and f.relative_to(ROOT / folder).parts[0] in MAPPED:
                continue  # (the links to the folders beside it)
            found[module_name(f)] = f
    return found


MODULES = sources()


def layer_of(module: str) -> int:
    if module == "ralph":  # the top package's __init__, which is empty
        return -1
    for i, layer in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in layer):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and the Layout of docs/development.md)")


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
    return [(name, line) for name, line in found if name.split(".")[0] in FOLDERS]


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


LOOP_PARTS = ("ralph.memory", "ralph.records", "ralph.drafting", "ralph.lanes", "ralph.provisional")


def test_the_loop_sees_only_the_domain() -> None:
    """The loop imports no concrete class: its collaborators are the domain's Protocols, and its own
    parts, which see only the domain and each other."""
    for module in ("ralph.loop", *LOOP_PARTS):
        targets = {t for t, _ in imports(module, MODULES[module])}
        assert targets and all(t.startswith("ralph.domain") or t in LOOP_PARTS for t in targets), (
            module,
            targets,
        )


def test_the_scan_sees_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: a sandboxes module importing the loop is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from ralph.loop import Loop\n    from . import workspace\n")
    found = imports("ralph.sandboxes.bad", bad)
    assert ("ralph.loop", 2) in found and ("ralph.sandboxes.workspace", 3) in found
    assert layer_of("ralph.loop") > layer_of("ralph.sandboxes.bad")


@pytest.mark.parametrize(
    "package", ["ralph.domain", "ralph.validators", "ralph.router", "ralph.sandboxes", "ralph.drafters"]
)
def test_each_package_says_what_it_holds(package: str) -> None:
    assert ast.get_docstring(ast.parse(MODULES[package].read_text())), f"{package}/__init__.py: no docstring"


@pytest.mark.slow
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


@pytest.mark.slow
def test_nothing_imports_the_folders_by_their_top_level_names() -> None:
    """`validators` is a PyPI package of its own: ralph's code and tests import `ralph.validators`,
    never a top-level name that would clash with it (or load a second copy of a module)."""
    code = [*MODULES.items(), *((f"tests.{f.stem}", f) for f in sorted((ROOT / "tests").rglob("*.py")))]
    found = []
    for module, path in code:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{module}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in MAPPED]
    assert not found, "\n".join(found)


def test_the_links_in_ralph_are_the_folders_beside_it() -> None:
    for folder in MAPPED:
        link = ROOT / "ralph" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link


@pytest.mark.slow
def test_the_wheel_adds_one_import_name_and_runs(tmp_path: Path) -> None:
    """Built and installed as a user would get it: `ralph` is the one top-level name in the wheel
    (no `validators` to clash with the PyPI package), the mapped folders are in it as files, and the
    installed package imports and runs from there."""
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("hatchling")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path,
            ROOT,
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("ralph_loop-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"ralph"}
    for folder in MAPPED:
        assert f"ralph/{folder}/__init__.py" in names
    assert "ralph/validators/_plugin/ralph_pytest_report.py" in names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    site = str(tmp_path / "site")
    # (a checkout on the path, as an editable install puts it there: not what the wheel installs)
    checkout = "os.path.isfile(os.path.join(p, 'validators', '__init__.py'))"
    probe = (
        "import ralph.validators.pipeline as p, ralph.loop, importlib.util as u;"
        "from ralph.validators.toolchain import PLUGIN_DIR;"
        "assert u.find_spec('validators') is None and u.find_spec('sandboxes') is None;"
        "assert PLUGIN_DIR.joinpath('ralph_worker.py').is_file(); print(p.__file__)"
    )
    ran = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys, os; sys.path[:] = [{site!r}, *(p for p in sys.path if not {checkout})]; {probe}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ran.returncode == 0 and ran.stdout.startswith(str(tmp_path / "site")), ran.stderr[-2000:]


def test_every_parse_goes_through_the_process_wide_lock() -> None:
    """`ast.parse`, `ast.literal_eval` (which parses text) and `PyCF_ONLY_AST` only in
    ralph.domain.pyast, and griffe only inside its `locked(...)`: two threads building trees at once
    can fail spuriously on CPython 3.11 (tests/test_pyast.py). The pytest plugin runs in the
    project's own test process, not ralph's, and is left out."""
    direct = []
    for module, path in MODULES.items():
        if module == "ralph.domain.pyast" or "._plugin" in module:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.ImportFrom) and node.module == "ast") or (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in PARSING
                and node.lineno not in _locked_lines(path)
            ):
                direct.append(f"{module}:{node.lineno}")
    assert not direct, "\n".join(direct)


PARSING = {
    ("ast", "parse"),
    ("ast", "literal_eval"),
    ("ast", "PyCF_ONLY_AST"),
    ("griffe", "visit"),
    ("griffe", "load"),
    ("griffe", "temporary_visited_module"),
}


def _locked_lines(path: Path) -> set[int]:
    """The lines inside a call of `locked(...)` (ralph.domain.pyast's) in the module at `path`."""
    return {
        inner.lineno
        for call in ast.walk(ast.parse(path.read_text()))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "locked"
        for inner in ast.walk(call)
        if isinstance(inner, ast.expr)
    }
