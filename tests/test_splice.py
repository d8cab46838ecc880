"""`spliced`: a module's code after an edit of one function's body, built from the code before it, is
what compiling the whole edited text gives, or None (then the whole text is compiled)."""

from __future__ import annotations

import builtins
import importlib.util
import marshal
import os
import random
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import CodeType

import pytest

import ralph
from ralph.domain import splice
from ralph.domain.results import Scope
from ralph.drafters.mutation_ops import generate_mutants
from ralph.sandboxes.local import LocalSandbox
from ralph.validators import syntax
from ralph.validators.syntax import SyntaxValidator
from ralph.validators.toolchain import Toolchain

STDLIB = Path(sysconfig.get_paths()["stdlib"])
CORPUS = [
    STDLIB / "argparse.py",
    STDLIB / "dataclasses.py",
    STDLIB / "typing.py",
    STDLIB / "email" / "_header_value_parser.py",
    STDLIB / "asyncio" / "base_events.py",
    Path(ralph.__file__).parent / "validators" / "policy.py",
    Path(ralph.__file__).parent / "sandboxes" / "bwrap.py",
]


def _difference(a: CodeType, b: CodeType, where: str = "") -> str | None:
    """Where two code objects differ in anything a compile sets (None: nowhere), nested code too."""
    where = f"{where}/{a.co_name}"
    skipped = ("co_lines", "co_positions", "co_lnotab", "co_consts")
    for attribute in dir(a):
        if (
            attribute.startswith("co_")
            and attribute not in skipped
            and getattr(a, attribute) != getattr(b, attribute)
        ):
            return f"{where}.{attribute}"
    if len(a.co_consts) != len(b.co_consts):
        return f"{where}: constants"
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, CodeType) and isinstance(y, CodeType):
            if found := _difference(x, y, where):
                return found
        elif not _same_constant(x, y):
            return f"{where}: constant {x!r}"
    return None


def _same_constant(x: object, y: object) -> bool:
    """By type and value (-0.0 is not 0.0, nan is nan), not by how marshal shares the objects."""
    if type(x) is not type(y):
        return False
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(_same_constant(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, float | complex):
        return repr(x) == repr(y)
    return x == y


def _compiles(text: bytes, filename: str) -> CodeType | None:
    try:
        return compile(text, filename, "exec", dont_inherit=True, optimize=0)
    except SyntaxError:
        return None


def _in_bodies(base: splice.Compiled, rng: random.Random, count: int) -> list[int]:
    lines = [line for body in base.bodies for line in range(body.body, body.end + 1)]
    return rng.sample(lines, min(count, len(lines)))


@pytest.mark.slow
def test_a_spliced_module_is_what_compiling_the_whole_text_gives_on_mutants_of_real_modules():
    rng = random.Random(11)
    spliced = tried = 0
    for file in CORPUS:
        source = file.read_bytes()
        base = splice.compiled(source, str(file))
        assert base.code == compile(source, str(file), "exec", dont_inherit=True)
        mutants = generate_mutants(source.decode(), _in_bodies(base, rng, 40))
        for mutant in rng.sample(mutants, min(26, len(mutants))):
            text = mutant.source.encode()
            whole = _compiles(text, str(file))
            got = splice.spliced(base, text)
            tried += 1
            if whole is None:
                assert got is None, mutant.description  # (a syntax error is the whole compile's to say)
                continue
            if got is not None:
                spliced += 1
                assert _difference(got, whole) is None, (
                    file.name,
                    mutant.description,
                    _difference(got, whole),
                )
    assert tried > 150 and spliced > 0.5 * tried, (spliced, tried)


def test_a_call_on_a_module_level_import_compiles_as_in_the_whole_module():
    # CPython calls a method of an imported name with other instructions (`is_import_originated`):
    # a body that starts calling one must not be compiled as if the name were a plain global.
    source = b"import re as _re\nfrom os import path\n\n\nclass A:\n    def f(self, x):\n        x = x\n        return x\n"
    base = splice.compiled(source, "m.py")
    assert base.imported == ("_re", "path")
    for line in (
        b"        x = _re.compile(x)\n",
        b"        x = path.join(x)\n",
        b"        x = x.y(x)\n",
    ):
        edited = source.replace(b"        x = x\n", line)
        got = splice.spliced(base, edited)
        assert (
            got is not None and _difference(got, compile(edited, "m.py", "exec", dont_inherit=True)) is None
        )


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ((b"def f(a=1):", b"def f(a=2):"), "the header's default is the module's code"),
        ((b"    return a\n", b"    return a\n    return a\n"), "a line more"),
        ((b"    return a\n", b"return a\n"), "the body no longer one function"),
        ((b"    return a\n", b"    return (a\n"), "a syntax error"),
        ((b"X = 1", b"X = 2"), "outside any function"),
        (
            (b"    return a\n", b"    return a + 100\n"),
            "the last line longer: the module's code says where f ends",
        ),
    ],
)
def test_an_edit_not_of_one_body_alone_is_compiled_whole(edit, why):
    source = b"X = 1\n\n\ndef f(a=1):\n    a += 1\n    return a\n\n\ndef g():\n    pass\n"
    base = splice.compiled(source, "m.py")
    assert splice.spliced(base, source.replace(*edit)) is None, why


def test_methods_nested_classes_decorators_async_and_super_splice_exactly():
    source = (
        b"from __future__ import annotations\n"
        b"import functools\n\n\n"
        b"class Outer:\n"
        b"    class Inner:\n"
        b"        @functools.cache\n"
        b"        def m(self, x: int) -> int:\n"
        b"            y: list[int] = [x]\n"
        b"            return self.__private(y)\n"
        b"\n"
        b"        def __private(self, y):\n"
        b"            def inner(z: int) -> int:\n"
        b"                return z\n"
        b"            return inner(y[0])\n"
        b"\n"
        b"    async def a(self):\n"
        b"        await self.b()\n"
        b"        return 1\n"
        b"\n"
        b"    def s(self):\n"
        b"        x = 1\n"
        b"        return x\n"
    )
    base = splice.compiled(source, "m.py")
    assert [b.name for b in base.bodies] == ["m", "__private", "a", "s"]
    edits = [
        (b"            y: list[int] = [x]\n", b"            y: list[str] = [x + 1]\n"),
        (b"                return z\n", b"                return -z\n"),
        (b"        await self.b()\n", b"        await self.c()\n"),
        (b"        x = 1\n", b"        x = super()\n"),  # (a `__class__` cell the class must now make)
        (b"        x = 1\n", b"        x = self.__p\n"),
    ]
    for old, new in edits:
        edited = source.replace(old, new)
        got = splice.spliced(base, edited)
        whole = compile(edited, "m.py", "exec", dont_inherit=True)
        assert got is None or _difference(got, whole) is None, new
        if b"super" not in new:
            assert got is not None, new


def test_a_declared_encoding_or_no_room_for_the_imports_is_compiled_whole():
    latin = b"# -*- coding: latin-1 -*-\ndef f():\n    return 'x'\n"
    assert splice.compiled(latin, "m.py").bodies == ()
    first = b"def f():\n    return 1\nimport os\n"
    base = splice.compiled(first, "m.py")
    assert splice.spliced(base, first.replace(b"return 1", b"return 2")) is None


def test_the_syntax_stage_leaves_the_spliced_code_where_the_tests_import_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    module = tmp_path / "pkg" / "calc.py"
    module.parent.mkdir()
    source = (
        "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\ndef twice(x):\n    return x * 2\n"
    )
    module.write_text(source)
    validator = SyntaxValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path), write_bytecode=True)
    validator.learn("pkg/calc.py", source)
    filename = str(module)
    monkeypatch.setitem(syntax._BASES, filename, syntax._BASES[filename])  # (gone after the test)
    edited = source.replace("return x * 2", "return x * 3")
    module.write_text(edited)
    compiled: list[int] = []
    real = builtins.compile

    def counting(text, *args, **kwargs):  # (a text read, or a tree compiled: the text read before)
        compiled.append(len(text) if isinstance(text, str | bytes) else 0)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    result = validator.check(Scope(paths=("pkg/calc.py",)))
    monkeypatch.undo()
    assert result.ok
    assert compiled and max(compiled) < len(edited) - len("def area(r):")  # (the body alone)
    cached = tmp_path / "pkg" / "__pycache__" / f"calc.{sys.implementation.cache_tag}.pyc"
    assert cached.read_bytes()[:4] == importlib.util.MAGIC_NUMBER
    code = marshal.loads(cached.read_bytes()[16:])
    assert _difference(code, compile(edited.encode(), filename, "exec", dont_inherit=True)) is None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = [sys.executable, "-c", "import pkg.calc as c; print(c.twice(5), c.area(1) > 3)"]
    assert subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True).stdout.split() == [
        "15",
        "True",
    ]
    # A syntax error is the whole compile's to say, at its line.
    module.write_text(source.replace("return x * 2", "return x *"))
    broken = validator.check(Scope(paths=("pkg/calc.py",)))
    assert not broken.ok and "pkg/calc.py:9" in broken.detail


def test_the_files_compiled_ahead_are_the_last_ones_learnt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(syntax, "_BASES", {})
    monkeypatch.setattr(syntax, "MAX_BASES", 2)
    validator = SyntaxValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    for name in ("a", "b", "c"):
        validator.learn(f"{name}.py", f"def {name}():\n    return 1\n")
    validator.learn("broken.py", "def f(:\n")  # (no code to splice into: compiled whole when edited)
    validator.learn("b.py", "def b():\n    return 2\n")
    assert list(syntax._BASES) == [str(tmp_path / "c.py"), str(tmp_path / "b.py")]


def test_a_global_statement_added_or_removed_in_a_body_is_compiled_whole():
    # (a `global` anywhere in the module makes its own code store and load that name differently)
    source = b"x = 1\n\n\ndef f():\n    return 1\n\n\ndef g():\n    global x\n    x = 2\n\n\nprint(x)\n"
    base = splice.compiled(source, "m.py")
    added = source.replace(b"    return 1\n", b"    global x\n")
    removed = source.replace(b"    global x\n", b"    y = 0\n")
    whole = compile(added, "m.py", "exec", dont_inherit=True)
    assert _difference(base.code, whole) is not None  # (what a splice would have got wrong)
    assert splice.spliced(base, added) is None
    assert splice.spliced(base, removed) is None
    assert splice.spliced(base, source.replace(b"    return 1\n", b"    return 2\n")) is not None


@pytest.mark.parametrize(
    "body",
    [
        b"    if y:\n        global x\n",
        b"    try:\n        pass\n    finally:\n        global x\n",
        b"    try:\n        pass\n    except E:\n        global x\n",
        b"    def inner():\n        global x\n",
        b"    class C:\n        global x\n",
        b"    match y:\n        case 1:\n            global x\n",
        b"    with a:\n        y = 1; global x\n",
    ],
)
def test_a_global_statement_nested_anywhere_in_the_body_is_compiled_whole(body):
    lines = body.count(b"\n")
    stand = b"    pass\n" * lines
    source = b"x = 1\n\n\ndef f():\n" + stand + b"    return 0\n\n\nprint(x)\n"
    base = splice.compiled(source, "m.py")
    edited = source.replace(stand, body)
    assert _difference(base.code, compile(edited, "m.py", "exec", dont_inherit=True)) is not None
    assert splice.spliced(base, edited) is None
    # The word alone (a comment, a string, a longer name) is no statement: that body splices.
    words = (b"    # global x\n", b"    y = 'global'\n", b"    globally = 1\n")
    edited = source.replace(stand, b"".join(words[i % 3] for i in range(lines)))
    got = splice.spliced(base, edited)
    assert got is not None and _difference(got, compile(edited, "m.py", "exec", dont_inherit=True)) is None


def test_a_candidate_compiles_only_its_own_body_once_its_file_is_prepared(monkeypatch: pytest.MonkeyPatch):
    file = CORPUS[0]  # (argparse: a large module)
    source = file.read_bytes()
    base = splice.compiled(source, str(file))
    splice.prepare(base)
    body = max(base.bodies, key=lambda b: b.end - b.body)
    lines = source.splitlines(keepends=True)
    line = next(i for i in range(body.body, body.end + 1) if b" = " in lines[i - 1])
    lines[line - 1] = lines[line - 1].replace(b" = ", b" =  ", 1)
    edited = b"".join(lines)
    read: list[int] = []
    real = builtins.compile

    def counting(text, *args, **kwargs):
        if isinstance(text, str | bytes):
            read.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    got = splice.spliced(base, edited)
    monkeypatch.undo()
    assert got is not None
    assert _difference(got, compile(edited, str(file), "exec", dont_inherit=True)) is None
    function = sum(len(x) for x in lines[body.start - 1 : body.end])
    assert len(read) == 1 and read[0] < function + body.start + 200  # (the new body's text, once)


def test_a_declared_encoding_after_a_bare_carriage_return_is_compiled_whole():
    source = b"\r# -*- coding: latin-1 -*-\ndef f():\n    return 'x'\n"
    assert splice.compiled(source, "m.py").bodies == ()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="type parameters are 3.12 syntax")
def test_a_module_with_a_generic_class_is_compiled_whole():
    # 3.12 releases before CPython gh-119395 mangle `__secret` in `f` with `A`, which no stand-in holds.
    source = b"class A[T]:\n    pass\n\n\ndef f(o):\n    x = 1\n    return x\n"
    assert splice.compiled(source, "m.py").bodies == ()
    nested = b"class Outer:\n    if True:\n        class Inner[T]:\n            pass\n\n    def m(self):\n        return 1\n"
    assert splice.compiled(nested, "m.py").bodies == ()
