"""The warm test runner, run by the target's interpreter: `python ralph_worker.py MODULE...`.

It imports pytest, our report plugin and the given third-party modules once (never the repo's own
modules), then serves requests: one request -> fork -> `pytest.main(args)` in the child -> one JSON
line back. A child that runs past its timeout is killed with its whole process group.

The channel is a pipe pair of its own (descriptors named in $RALPH_CHANNEL), which every child closes
before anything else runs. A request comes framed (its length, a newline, the JSON) and followed by a
per-request secret that the worker reads only once the request's child is forked: no test process
ever holds it, and the host takes a reply only with its request's id and secret. Every $RALPH_*
setting leaves the environment at start, so no test sees one.

The worker is a child subreaper: whatever a test child starts (setsid daemons, double forks) is
reparented to it, and before it replies it kills every process below it but the readied spare, so
nothing a candidate started outlives that candidate's request. It is not dumpable, so a test cannot
ptrace it or write its memory. A request whose processes make the workspace's filesystem lose more
than $RALPH_DISK_CAP bytes (default 1 GiB) is killed. Depends on nothing but the standard library
and pytest.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import marshal
import os
import re
import select
import signal
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Iterator

import pytest


def _pytest_plugins(own: set) -> tuple[list[str], list[str]]:
    """pytest's builtin plugins, and the installed ones it would autoload: importing them is most of
    what a run spends before collecting (docs/measurements.md). Not a
    plugin of the project's own (an editable install's: importing it now would run the workspace's
    code as it is when the worker starts, a candidate's perhaps, with effects no child can undo),
    none when autoloading is off, and none where $RALPH_PRELOAD_PLUGINS is 0 (the gate's worker:
    its children import them as a fresh run does, honouring `-p no:NAME`)."""
    from importlib.metadata import entry_points

    from _pytest.config import default_plugins

    builtin = [f"_pytest.{name}" for name in default_plugins if name != "python_path"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") or _SETTINGS.get("RALPH_PRELOAD_PLUGINS") == "0":
        return builtin, []
    modules = [ep.value.split(":")[0] for ep in entry_points(group="pytest11")]
    return builtin, [m for m in modules if m.split(".")[0] not in own]


def _preload(modules: list[str]) -> list[str]:
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except BaseException:  # a dependency that fails to import just is not preloaded
            continue
    return loaded


def _importable(modules: list[str]) -> list[str]:
    """Of the project's imports, the names to preload: every top-level one, a dotted one only below
    the standard library (a package's submodule may depend on what a conftest sets first:
    matplotlib.pyplot's backend); none before Python 3.10, which cannot say what that is."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    return [name for name in modules if "." not in name or name.split(".")[0] in stdlib]


# Code objects the spare read ahead from the project's bytecode caches, with the bytes they were read
# from (`_read_code_ahead`), found by those bytes' length and ends: `marshal.loads` of the same bytes
# gives the same code, so an import that reads those very bytes gets this object instead (once:
# importlib sets a code's file name in place). Compared whole, never hashed (~1 ms a MB).
_code_ahead: dict[tuple[int, bytes, bytes], tuple[bytes, object]] = {}


def _ends(data) -> tuple[int, bytes, bytes]:
    return len(data), bytes(data[:32]), bytes(data[-32:])


def _loads(data, /, **options):
    """`marshal.loads`, or the code read ahead from the same bytes."""
    if not options and _code_ahead:
        try:
            key = _ends(data)
            found = _code_ahead.get(key)
            if found is not None and found[0] == data:
                del _code_ahead[key]
                return found[1]
        except Exception:  # (a buffer that cannot be sliced or compared: unmarshalled as it comes)
            pass
    return marshal.loads(data, **options)


def _cached_code_files(root: str, first: list[str], waiting: Callable[[], bool]) -> Iterator[str]:
    """The bytecode caches this interpreter reads under `root` (importlib's, and pytest's of its
    rewritten test modules), those of the files in `first` (the last request's test files) first;
    while `waiting()`."""
    tag = getattr(sys.implementation, "cache_tag", None)
    if not tag:
        return
    given: set[str] = set()
    for name in dict.fromkeys(n for n in first if n.endswith(".py")):
        head, _, file = name.rpartition("/")
        folder = os.path.join(root, head, "__pycache__")
        with contextlib.suppress(OSError):
            found = sorted(f for f in os.listdir(folder) if f.startswith(f"{file[:-3]}.{tag}"))
            given.update(os.path.join(folder, f) for f in found)
            yield from (os.path.join(folder, f) for f in found)
    for folder, dirs, files in os.walk(root):
        if not waiting():
            return
        if "pyvenv.cfg" in files or "site-packages" in folder:
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        if os.path.basename(folder) == "__pycache__":
            paths = (os.path.join(folder, f) for f in sorted(files) if f".{tag}" in f and f.endswith(".pyc"))
            yield from (p for p in paths if p not in given)  # (those of `first`: read already)


def _read_code_ahead(root: str, first: list[str], request_read: int, max_bytes: int = 8 << 20) -> int:
    """In the spare, waiting for its request: unmarshal the cached code under `root`
    (`_cached_code_files`: after each file's 16-byte header) into `_code_ahead` until the request is
    there to read, or `max_bytes` were read. Nothing is imported or run; an import that then reads
    the same bytes skips the unmarshalling (~1 ms of pyasn1's test_decoder.py). Returns how many."""
    import importlib.util

    def waiting() -> bool:
        return not select.select([request_read], [], [], 0)[0]

    read = 0
    for path in _cached_code_files(root, first, waiting):
        if read >= max_bytes or not waiting():
            break
        try:
            data = _regular_file_head(path, max_bytes - read + 1)
            read += len(data)
            if len(data) <= 16 or data[:4] != importlib.util.MAGIC_NUMBER or read > max_bytes:
                continue
            code = data[16:]
            key = _ends(code)
            if key not in _code_ahead:
                _code_ahead[key] = (code, marshal.loads(code))
        except Exception:  # (unreadable, or not code: the import finds out as it would have)
            continue
    return len(_code_ahead)


def _memoized_unmarshalling() -> None:
    """importlib's (and pytest's rewriter's, `_whole_file_cache_reads`) unmarshalling of cached
    code goes through `_loads`."""
    external = sys.modules.get("_frozen_importlib_external")
    if external is not None and getattr(external, "marshal", None) is marshal:
        shim = types.ModuleType("marshal")
        shim.__dict__.update(vars(marshal))
        shim.loads = _loads
        external.marshal = shim


def _plain_unmarshalling() -> None:
    """Undo `_memoized_unmarshalling`. What was read ahead and not taken stays, unused, until the
    child ends: freeing it is ~1 ms of pyasn1's collection (1.7 MB of cached code), and the child's
    exit is no faster for it (docs/measurements.md); it is at most `_read_code_ahead`'s 8 MB of
    bytes and their code, against the tests' 4 GiB limit."""
    external = sys.modules.get("_frozen_importlib_external")
    if external is not None and getattr(getattr(external, "marshal", None), "loads", None) is _loads:
        external.marshal = marshal


def _whole_file_cache_reads() -> None:
    """pytest's assertion rewriter reads a test module's cached code with `marshal.load(file)`,
    which takes the file a few bytes at a time through the file object: ~3.5 ms for tabulate's
    test_output.py against ~0.5 ms for the same bytes read at once (docs/measurements.md). Its
    `marshal` becomes one whose `load` reads the rest of the file in one call: the same bytes give
    the same code or the same error."""
    rewrite = sys.modules.get("_pytest.assertion.rewrite")
    if rewrite is None or getattr(rewrite, "marshal", None) is not marshal:
        return
    whole = types.ModuleType("marshal")
    whole.__dict__.update(vars(marshal))

    def load(file, /, **options):
        return _loads(file.read(), **options)

    whole.load = load
    rewrite.marshal = whole


def _fixture_marked(value: object) -> bool:
    """Whether pytest (7 to 9) could take `value`, or what it wraps, for a fixture."""
    import inspect

    try:
        values = (value, inspect.unwrap(value))  # type: ignore[arg-type]
    except Exception:  # (a wrapper loop: pytest takes it for no fixture)
        values = (value,)
    return any(
        type(v).__name__ == "FixtureFunctionDefinition"
        or getattr(v, "_fixture_function_marker", None) is not None
        or getattr(v, "_pytestfixturefunction", None) is not None
        for v in values
    )


def _narrow_unittest_fixture_scans() -> None:
    """pytest 8 and later look for fixtures on an instance of each unittest class they collect, name
    by name over its `dir()`, of which 118 names are unittest.TestCase's and object's own, the same
    for every class (collecting 15 of pyasn1's classes: 82 -> 59 ms, docs/measurements.md). While
    pytest scans such an instance, its `dir()` leaves out the names that only TestCase or object
    define, each checked here to be no fixture nor a wrapper of one (and checked unchanged at each
    scan): what the scan finds is the same. A metaclass's names are kept (its descriptors win a
    class lookup); a class that defines its own `__dir__` or `__getattribute__` is scanned whole."""
    import unittest

    manager = getattr(sys.modules.get("_pytest.fixtures"), "FixtureManager", None)
    case = unittest.TestCase
    if manager is None or "__dir__" in vars(case):
        return
    bases = {case: dict(vars(case)), object: dict(vars(object))}
    if any(
        _fixture_marked(v) or _fixture_marked(getattr(b, n, None)) for b in bases for n, v in bases[b].items()
    ):
        return
    inert = frozenset(bases[case]) | frozenset(bases[object])
    scan = manager.parsefactories

    def parsefactories(self, *args, **kwargs):
        holder = kwargs.get("holder", args[0] if args else None)
        if not isinstance(holder, case) or any(vars(b) != d for b, d in bases.items()):
            return scan(self, *args, **kwargs)
        own = set(vars(holder))
        for base in type(holder).__mro__:
            if base not in bases:
                if {"__dir__", "__getattribute__"} & vars(base).keys():  # names of its own making
                    return scan(self, *args, **kwargs)
                own.update(vars(base))
        for meta in type(type(holder)).__mro__:  # (a metaclass's descriptor wins a class lookup)
            if meta not in (type, object):
                own.update(vars(meta))

        def narrowed(instance):
            names = super(case, instance).__dir__()  # (what `dir()` would have called)
            return names if instance is not holder else [n for n in names if n in own or n not in inert]

        case.__dir__ = narrowed  # type: ignore[method-assign]
        try:
            return scan(self, *args, **kwargs)
        finally:
            del case.__dir__

    manager.parsefactories = parsefactories


# The `re` functions whose pattern is compiled through its cache, and where each takes its flags by
# position.
_RE_CALLS = {
    "compile": 1,
    "match": 2,
    "fullmatch": 2,
    "search": 2,
    "findall": 2,
    "finditer": 2,
    "split": 3,
    "sub": 4,
    "subn": 4,
}
_RE_CALLED = re.compile(rb"(?<![\w.])re\.(?:%s)\(" % "|".join(_RE_CALLS).encode())


def _warm_regex_cache(root: str, max_files: int = 400, max_bytes: int = 4 << 20, max_s: float = 0.2) -> int:
    """Compile ahead the regular expressions the project's modules compile when imported (or call
    `re` with): each child's imports then find them in `re`'s own cache instead of compiling them
    again (importing tomlkit in a child: 14.0 -> 9.8 ms, docs/measurements.md).
    Only literal patterns called on the `re` module by name, with no flags or `re.NAME` flags, and
    none that warns when compiled (the test must see that warning); the project's files are read as
    text and parsed, never imported, for `max_s` of CPU time at most (the worker's start waits on it). Returns
    how many it compiled."""
    seen, read, compiled, deadline = 0, 0, 0, time.process_time() + max_s  # (its own work, not a stall)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")
        )
        if "pyvenv.cfg" in files or "site-packages" in folder:
            dirs[:] = []
            continue
        for name in sorted(n for n in files if n.endswith(".py")):
            if seen >= max_files or read >= max_bytes or time.process_time() > deadline:
                return compiled
            seen += 1
            try:
                source = _regular_file_head(os.path.join(folder, name), max_bytes - read + 1)
                read += len(source)
                if read > max_bytes or not _RE_CALLED.search(source):
                    continue
                for pattern, flags in _literal_patterns(source):
                    if _compiles_quietly(pattern, flags):  # (what warns must warn in the test)
                        re.compile(pattern, flags)
                        compiled += 1
            except Exception:  # (an unreadable file, a tree too deep: nothing is compiled ahead)
                continue
    return compiled


def _literal_patterns(source: bytes):
    """The (pattern, flags) of each call of `re.<function>` in `source` with a literal pattern and
    no flags or `re.NAME` flags (none with re.DEBUG, which prints and is never cached, or
    re.TEMPLATE, which warns each time)."""
    import ast

    for node in ast.walk(ast.parse(source)):
        call = node.func if isinstance(node, ast.Call) else None
        if (
            isinstance(call, ast.Attribute)
            and isinstance(call.value, ast.Name)
            and call.value.id == "re"
            and call.attr in _RE_CALLS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, (str, bytes))
            and len(node.args[0].value) < 4096
        ):
            position = _RE_CALLS[call.attr]
            given = node.args[position] if len(node.args) > position else None
            given = next((k.value for k in node.keywords if k.arg == "flags"), given)
            flags = _regex_flags(given)
            if flags is not None and not flags & (int(re.DEBUG) | int(getattr(re, "TEMPLATE", 0))):
                yield node.args[0].value, flags


def _regex_flags(node) -> int | None:
    """The value of flags written `re.NAME | re.NAME ...` (0 where none are given), else None."""
    import ast

    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        value = getattr(re, node.attr, None)
        return int(value) if isinstance(value, re.RegexFlag) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _regex_flags(node.left), _regex_flags(node.right)
        return None if left is None or right is None else left | right
    return None


def _regular_file_head(path: str, size: int) -> bytes:
    """Up to `size` bytes of the regular file at `path`, reached through no link (else empty)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)


def _compiles_quietly(pattern: str | bytes, flags: int) -> bool:
    """Whether `pattern` compiles without an error or a warning (compiled outside `re`'s cache: a
    cached pattern warns no more, and a test may expect the warning or make it an error)."""
    import warnings

    try:
        from re import _compiler as compiler  # type: ignore[attr-defined]
    except ImportError:  # (before Python 3.11)
        import sre_compile as compiler  # type: ignore[no-redef]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compiler.compile(pattern, flags)
        except Exception:
            return False
    return not caught


def _forget_project_modules(own: list[str], root: str) -> None:
    """Drop the project's own modules (an installed copy a dependency imported, say): each child must
    import them from the workspace."""
    own_names = {name for name in own if name}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if name.split(".")[0] in own_names or file.startswith(root + os.sep):
            del sys.modules[name]


# The worker's own settings, out of the environment before any child is forked.
_SETTINGS = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("RALPH_")}
_CHANNEL = [int(fd) for fd in _SETTINGS.get("RALPH_CHANNEL", "0,1").split(",")]


def _read_exactly(fd: int, size: int) -> bytes:
    """`size` bytes of the request pipe, and not one more (what follows is not ours to read yet)."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _next_message() -> dict:
    """The next framed message from the host: its length in digits, a newline, the JSON."""
    head = b""
    while not head.endswith(b"\n"):
        head += _read_exactly(_CHANNEL[0], 1)
        if len(head) > 12:
            raise EOFError
    return json.loads(_read_exactly(_CHANNEL[0], int(head)))


def _secret() -> str:
    """The request's secret, read after its child is forked (32 hex digits and a newline)."""
    return _read_exactly(_CHANNEL[0], 33).decode().strip()


# Ralph's pid. The worker watches it rather than asking for a parent-death signal, which Linux ties
# to the thread that started the worker (a thread pool's thread in ralph), not to the process.
_PARENT = os.getppid()


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:
    """Linux, in each test child: be killed when the worker goes, so a test looping forever never
    outlives the worker that started it."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _descendants() -> list[int]:
    """Every process below this one (children of children too), from /proc."""
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def _kill_leftovers() -> int:
    """Kill everything below the worker and reap it (call when no spare is alive). Orphans of a test
    are ours (we are a subreaper), so a daemon cannot slip away between rounds."""
    killed = 0
    for _ in range(200):
        pids = _descendants()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        _reap(0.05)
    _reap(0.0)
    if _descendants():  # still there after every round: this request's verdict cannot be trusted
        return -1
    return killed


def _reap(seconds: float) -> None:
    """Reap exited children for up to `seconds` (until none is left)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.001)


def _free_bytes(path: str) -> int | None:
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def _become_child() -> None:
    """In a freshly forked child: die with the worker, lead a process group, take SIGINT as a fresh
    Python does (KeyboardInterrupt), read nothing from the requests pipe."""
    _die_with_parent()
    for fd in _CHANNEL:  # the host's channel: no test may read a request or write a reply
        if fd > 2:
            os.close(fd)
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _redirect_output(fd: int) -> None:
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _enter(request: dict) -> None:
    os.chdir(request["cwd"])
    sys.path[:0] = [p for p in request.get("path", []) if p not in sys.path]
    _as_python_m_pytest([*request["args"], *request.get("tests", [])])


def _as_python_m_pytest(args: list) -> None:
    """What a test may read of how it was started, as `python -m pytest ARGS` has it, not the
    worker's: the command line and the `__main__` module (multiprocessing's spawn reads its spec)."""
    import importlib.util
    import types

    spec = importlib.util.find_spec("pytest.__main__")
    main = types.ModuleType("__main__")
    main.__file__ = spec.origin if spec is not None else None
    main.__spec__, main.__package__ = spec, "pytest"
    sys.modules["__main__"] = main
    sys.argv = [main.__file__ or "pytest", *args]


# Preloaded plugins cannot have their asserts rewritten; pytest warns, and a suite that turns
# warnings into errors would stop on it.
_QUIET = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]


def _exit(code: int) -> None:
    """End a child: its output flushed, nothing of the worker's (atexit, buffers) run again."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_child(request: dict) -> None:
    """In the forked child: redirect output, run pytest, exit."""
    _become_child()
    _redirect_output(os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    _enter(request)
    os.environ.update(request.get("env", {}))
    code = 3
    try:
        code = int(pytest.main([*_QUIET, *request["args"], *request.get("tests", [])]))
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


class _Spare:
    """The next test child, forked ahead, with pytest configured for the next request's flags and
    its session started, held where collection begins until the request comes.

    Configuring pytest, registering its plugins and starting a session is most of a small run
    (less than half of a one-test child's time: docs/measurements.md); a
    spare does it while ralph drafts and applies the next candidate. Only used where that cannot
    differ from a fresh `pytest.main` in what it imports: the host allows it for projects without
    nested pytest settings, and a spare in which anything imported a project file other than a
    conftest (which no candidate may edit) before the request came is never used (those modules
    would predate the candidate).
    """

    def __init__(self, template: dict) -> None:
        self.key = (list(template["args"]), template.get("cwd"), template.get("path"))
        self.status = b""
        # Its output, until the request names a file: the worker copies it there when the spare
        # ends, however it ends (killed at its timeout, a crash, os._exit in a test).
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish)
        request_read, self._request = os.pipe()
        self._status, status_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._request)
            os.close(self._status)
            _run_spare(template, request_read, status_write, self.output.fileno())
        os.close(request_read)
        os.close(status_write)

    def matches(self, request: dict) -> bool:
        key = (list(request["args"]), request.get("cwd"), request.get("path"))
        return bool(request.get("tests")) and key == self.key

    def ready(self, timeout_s: float) -> bool:
        """Whether it configured cleanly (waits until it is done configuring)."""
        readable, _, _ = select.select([self._status], [], [], timeout_s)
        self.status = os.read(self._status, 16) if readable else b""
        return self.status == b"ready"

    def send(self, request: dict) -> None:
        data = memoryview(json.dumps(request).encode())
        with contextlib.suppress(OSError):  # a spare that died is seen when it is waited for
            while data:  # larger than a pipe's buffer: the spare reads as we write
                data = data[os.write(self._request, data) :]
        self._close()

    def discard(self) -> None:
        """Kill it and everything it started (a conftest's daemon in a session of its own too)."""
        self._close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)  # it may not lead its group yet
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        _kill_leftovers()  # (called with no request in flight: all below the worker is the spare's)
        self.output.close()

    def finish(self, path: str) -> None:
        """After it ended: its output into the request's file."""
        with self.output, contextlib.suppress(OSError):
            _copy_capped(self.output, path)

    def _close(self) -> None:
        for fd in (self._request, self._status):
            with contextlib.suppress(OSError):
                os.close(fd)


def _run_spare(template: dict, request_read: int, status_write: int, output: int) -> None:
    """In the spare: configure and start a session, then, where collection would begin, say whether
    it is usable and wait for the one request it runs."""
    _become_child()
    _redirect_output(os.dup(output))
    _enter(template)
    code = 3
    waiter = _Waiter(status_write, request_read, template["cwd"], list(template.get("tests", [])))
    try:
        from _pytest.config import _prepareconfig  # pytest's own first half of pytest.main()

        os.environ["PYTEST_VERSION"] = pytest.__version__  # as pytest.main() sets it
        config = _prepareconfig([*_QUIET, *template["args"]], None)
        config.pluginmanager.register(waiter, "ralph-spare")
        try:
            code = int(config.hook.pytest_cmdline_main(config=config))
        finally:
            config._ensure_unconfigure()
    except pytest.UsageError as error:  # as pytest.main() reports it (a test that is gone, say)
        print(f"ERROR: {error}", file=sys.stderr)
        code = int(pytest.ExitCode.USAGE_ERROR)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


ARGS_SOURCE = getattr(getattr(getattr(pytest, "Config", None), "ArgsSource", None), "ARGS", None)


def _warm_harness() -> None:
    """The report plugin's harness comparison done once ahead (`warm_harness`): pages it reads
    become the spare's own while it waits, not during its first test's report."""
    plugin = sys.modules.get("ralph_pytest_report")
    if plugin is not None:
        plugin.warm_harness()


class _Waiter:
    """A pytest plugin in the spare: holds the session at the start of collection until the request
    comes, then points the session at the request's tests and lets collection go on."""

    def __init__(self, status_write: int, request_read: int, cwd: str, tests: list[str]) -> None:
        self.status_write = status_write
        self.request_read = request_read
        self.tests = tests  # the last request's: their files' cached code is read ahead first
        self.request: dict | None = None
        # The project as its modules' paths may spell it: as given, and with links resolved.
        self.roots = tuple({os.path.abspath(cwd) + os.sep, os.path.realpath(cwd) + os.sep})
        # Root-relative files besides conftests that no candidate may edit (the packages that hold
        # a conftest, when the host says they are protected).
        self.fixed = frozenset(json.loads(_SETTINGS.get("RALPH_FIXED") or "[]"))

    def _tainting(self, file: str) -> bool:
        """Whether a module imported from `file` may predate the candidate: a project file that is
        neither a conftest nor one of the fixed files (a conftest is no candidate's to edit)."""
        root = next((r for r in self.roots if file.startswith(r)), None)
        if root is None or os.path.basename(file) == "conftest.py":
            return False
        return file[len(root) :].replace(os.sep, "/") not in self.fixed

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session) -> None:
        files = (getattr(module, "__file__", None) or "" for module in list(sys.modules.values()))
        tainted = any(self._tainting(file) for file in files)
        os.write(self.status_write, b"tainted" if tainted else b"ready")
        os.close(self.status_write)
        if tainted:  # configuring imported the project: what it imported predates the candidate
            os._exit(3)
        with contextlib.suppress(Exception):  # (a help, never a cause of failure)
            _warm_harness()
            _read_code_ahead(os.getcwd(), [t.partition("::")[0] for t in self.tests], self.request_read)
            _memoized_unmarshalling()
        self.request = json.loads(_read_all(self.request_read) or b"null")
        if not self.request:
            os._exit(3)
        os.environ.update(self.request.get("env", {}))
        import ralph_pytest_report

        ralph_pytest_report.arm()  # its settings came with the request, after the session started
        session.config.args = list(self.request["tests"])
        sys.argv = [sys.argv[0], *self.request["args"], *self.request["tests"]]
        if ARGS_SOURCE is not None:  # what pytest's header says the paths came from
            session.config.args_source = ARGS_SOURCE

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session) -> None:
        _plain_unmarshalling()


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _copy_capped(source, path: str, limit: int = 1 << 20) -> None:
    """The spare's output into the request's file: all of it, or its head and tail."""
    size = source.seek(0, os.SEEK_END)
    source.seek(0)
    with open(path, "wb") as out:
        if size <= 2 * limit:
            out.write(source.read())
            return
        out.write(source.read(limit))
        out.write(f"\n[... {size - 2 * limit} bytes of output dropped ...]\n".encode())
        source.seek(size - limit)
        out.write(source.read(limit))


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Python 3.9 or Linux 5.3: poll
        return None


def _serve_one(request: dict, spare: _Spare | None) -> dict:
    start = time.monotonic()
    timeout = float(request.get("timeout", 300))
    readied = spare is not None and spare.matches(request) and spare.ready(min(30.0, timeout))
    if spare is not None and readied:
        spare.send(request)
        pid = spare.pid
    else:
        if spare is not None:
            spare.discard()
        pid = os.fork()
        if pid == 0:
            _run_child(request)
    secret = _secret()  # (the child, forked without it, never holds it)
    # The reply waits for the child's exit to end, teardown included: until then the kernel may still
    # write into its memory, a shared mapping of a workspace file too (docs/measurements.md).
    status, disk_exceeded = _wait_child(pid, start + timeout, request["cwd"])
    timed_out = status is None and not disk_exceeded
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the child's stragglers too (a test that forked)
    if status is None:
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if status is not None else -9
    leftovers = _kill_leftovers()  # setsid daemons, double forks: reparented to us, killed
    if spare is not None and readied:
        spare.finish(request["output"])
    return {
        "id": request.get("id"),
        "secret": secret,
        "returncode": code,
        "timed_out": timed_out,
        "disk_exceeded": disk_exceeded,
        "leftovers_alive": leftovers < 0,
        "leftovers": leftovers,
        "seconds": time.monotonic() - start,
        "readied": readied,
    }


def _wait_child(pid: int, deadline: float, cwd: str) -> tuple[int | None, bool]:
    """The child's wait status (None past `deadline`, or once the disk cap is passed: then True)."""
    status = None
    pidfd = _pidfd(pid)
    cap = int(_SETTINGS.get("RALPH_DISK_CAP") or 1 << 30)
    free_at_start = _free_bytes(cwd)
    disk_exceeded = False
    while status is None:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
        elif time.monotonic() > deadline:
            break
        elif free_at_start is not None and free_at_start - (_free_bytes(cwd) or free_at_start) > cap:
            disk_exceeded = True
            break
        elif os.getppid() != _PARENT:  # ralph is gone: take the test down with us
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            os._exit(1)
        elif pidfd is not None:  # woken the moment the child exits
            select.select([pidfd], [], [], max(0.0, min(0.25, deadline - time.monotonic())))
        else:
            time.sleep(0.002)
    if pidfd is not None:
        os.close(pidfd)
    return status, disk_exceeded


def main() -> None:
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: a test's orphans become ours, to kill
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: no ptrace or /proc/<pid>/mem for the tests we fork
    own = [name for name in _SETTINGS.get("RALPH_OWN_MODULES", "").split(",") if name]
    builtin, plugins = _pytest_plugins(set(own))
    loaded = _preload([*builtin, "ralph_pytest_report", *plugins, *_importable(sys.argv[1:])])
    _whole_file_cache_reads()
    _narrow_unittest_fixture_scans()
    _warm_regex_cache(os.getcwd())
    _forget_project_modules(own, os.getcwd())
    if "ralph_pytest_report" in sys.modules:  # (where the installed code it judges lies)
        sys.modules["ralph_pytest_report"].learn_places()
    # What the worker imported lives as long as it does: keep it out of every child's collections.
    # pytest collects garbage at the end of each session (twice), which over an unfrozen heap of
    # preloaded modules is slow (docs/measurements.md).
    gc.collect()
    gc.freeze()
    out = os.fdopen(_CHANNEL[1], "w", closefd=False) if _CHANNEL[1] > 2 else sys.stdout
    out.write(json.dumps({"ready": True, "preloaded": loaded}) + "\n")
    out.flush()
    sparing = _SETTINGS.get("RALPH_SPARE") == "1"
    spare: _Spare | None = None
    template: dict | None = None  # the last request, for the spare the host may allow next
    while True:
        try:
            request = _next_message()
        except (EOFError, ValueError):
            return
        if request.get("discard_spare"):  # the workspace it configured on was not the state's
            if spare is not None:
                spare.discard()
                spare = None
            continue
        if request.get("spare_now"):  # the host saw nothing of the last request left: fork ahead
            if sparing and spare is None and template is not None:
                spare = _Spare(template)
            continue
        reply = _serve_one(request, spare)
        if spare is not None and spare.status == b"tainted":
            sparing = False  # configuring imports the project (a plugin or ini setting): never again
        spare = None
        template = request if request.get("spare") else None
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
