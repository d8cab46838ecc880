"""pytest plugin loaded into the target repo's pytest by ralph (``-p ralph_pytest_report``).

It runs inside the target's interpreter, so it depends on nothing but pytest (and coverage.py when the
target has it). It writes one JSON object per test outcome to $RALPH_REPORT, then one closing record
with pytest's exit status and how many tests it collected (the host checks the outcomes against both,
and a run without the closing record gives no verdict), and, when $RALPH_COVERAGE is set (the
baseline), the lines of files under $RALPH_COVERAGE_ROOT that each test executed and, under the
`<opened>` entry of the same file, the files there that the run opened for reading (what the tests'
data is: the host protects it as it protects the tests).

Its settings are read once, when the session starts (`arm`), and removed from the environment before
any test module is imported, so the project's code does not find the report's path there.

Under pytest-xdist (`-n N`, the gate on more cores) the controller alone writes the report: the
workers' reports reach it through `pytest_runtest_logreport`, with what our hooks in the worker
attached to them (the project's frames, whether the test raised). Each worker gets only the settings
its tests run under (the per-test limit, the project's root: `_WORKER_SETTINGS`), checks pytest's
machinery as a single process does, and hands what it saw changed back when it finishes. The closing
record then says which workers went down without that summary (crashed, killed, `os._exit`) and how
many of the tests the workers collected never reported: either gives no verdict.
"""

from __future__ import annotations

import contextlib
import doctest  # noqa: F401 (recorded with pytest's machinery before the project's code runs)
import json
import linecache
import operator
import os
import signal
import sys
import threading
import time
import unittest.case  # noqa: F401 (as doctest)
import warnings
from collections.abc import Iterator

import pytest

_MAX_MESSAGE = 4000
_report_file = None
_lines_by_test: dict[str, dict[str, set[int]]] = {}
_SETTINGS = (
    "RALPH_REPORT",
    "RALPH_COVERAGE",
    "RALPH_COVERAGE_ROOT",
    "RALPH_TEST_TIMEOUT",
    "RALPH_FIRST",
    "RALPH_STOP_ON_PASS",
    "RALPH_GUARD",
    "RALPH_PROGRESS",
    "RALPH_END_AT_FAILURE",
)
_settings: dict[str, str] = {}
_WORKER_SETTINGS = ("RALPH_TEST_TIMEOUT", "RALPH_COVERAGE_ROOT")
_in_worker = False  # a pytest-xdist worker: it checks and attaches, the controller writes
# The controller under pytest-xdist: the node ids the workers collected, those it wrote a record for,
# each worker started with why it is not accounted for (None: it handed back its summary), the tests
# a worker was running when it went down, and the internal errors the workers raised.
_xdist_collected: set[str] = set()
_recorded: set[str] = set()
_workers: dict[str, str | None] = {}
_crashed: list[str] = []
_internal_errors: list[str] = []
_failed_seen = 0  # failing reports pytest gave us, counted apart from what `_write` records
# Early stops the host asks for: at the first test that passes ($RALPH_STOP_ON_PASS: is any of these
# failing tests fixed?), or at the first failure of a test in $RALPH_GUARD (a JSON list file of the
# tests that pass in the accepted state: that failure is a regression, the verdict is known).
_guard: frozenset[str] = frozenset()
_progress_file = None
_open = open  # as it is when this module loads, before any of the project's code runs
# When the session started and its collection finished (wall clock, as it is when this module
# loads): where the run's time went, for `ralph bench verify --profile`. It decides nothing.
_clock = time.time
_phases: dict = {"start": None, "collected": None}
_session = None
_stopped: str | None = None
# The project's files (not Python) the run opened for reading -> the project's files whose code
# opened them, relative to the project ("" where none did: pytest or a plugin, for the tests).
_opened: dict[str, set[str]] = {}
_watching = False
_SKIPPED_OPENS = (".py", ".pyc", ".pyo", ".pyi", ".so", ".pyd")
_CACHES = ("/__pycache__/", "/.hypothesis/", "/.pytest_cache/", "/.mypy_cache/", "/.ruff_cache/", "/.tox/")


# What decides and records a test's outcome, as it was before any of the project's code ran: every
# name of these modules and of the classes they define. Product code that rewrote one (a report's
# constructor, pluggy's call loop, `Function.runtest`, `RaisesExc.__exit__`, doctest's output
# checker) could turn a failure into a pass; the policy refuses such code where it can read it, and
# this catches what it cannot. Checked at every report and at the end, with the hooks that decide
# outcomes (one added by the code under test) and each test's function, code, class and `runtest`:
# what changed is reported with where the code that changed it lies, and the host gives no verdict
# unless that is an installed pytest plugin (flaky replaces `call_and_report`) or the project's tests
# (a conftest).
_WATCHED = (
    "_pytest.runner",
    "_pytest.python",
    "_pytest.python_api",
    "_pytest.reports",
    "_pytest.skipping",
    "_pytest.outcomes",
    "_pytest.main",
    "_pytest.nodes",
    "_pytest.unittest",
    "_pytest.doctest",
    "_pytest.raises",
    "_pytest.fixtures",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
    "pytest",
    "doctest",
    "unittest.case",
    # pytest-xdist's, where the run goes across workers: what carries a worker's reports to the
    # controller and turns them back into reports there
    "xdist.remote",
    "xdist.dsession",
    "xdist.workermanage",
    "execnet.gateway_base",
    __name__,
)
_OUTCOME_HOOKS = (
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_pyfunc_call",
    "pytest_report_teststatus",
    "pytest_collection_modifyitems",
    "pytest_itemcollected",
    "pytest_pycollect_makeitem",
    "pytest_collectreport",
    "pytest_runtestloop",
    "pytest_sessionfinish",
    "pytest_report_to_serializable",
    "pytest_report_from_serializable",
)
_MISSING = object()
_dumps = json.dumps  # (as it is now: a test may patch json.dumps for its own ends)
# (a module's or a class's namespace, its name) -> _Namespace
_harness: dict[tuple[int, str], _Namespace] = {}
_hooks_seen: dict[int, tuple[object, object]] = {}  # hook functions judged -> (it, its code then)
_tests_seen: dict[str, tuple[object, object, type]] = {}  # node id -> its function, code and class
# (What changed, where the code that changed it lies: `_origin`) -> where it was first seen.
_changed: dict[tuple[str, str], str] = {}
_raised: dict[str, bool] = {}  # node id -> whether its last call raised, as our call wrapper saw it
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _installed_places() -> tuple[str, ...]:
    """The interpreter's standard library and installed packages (site-packages wherever they are)."""
    import site
    import sysconfig

    places = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(Exception):
        places.update(site.getsitepackages())
        places.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(p), "") for p in places if p)


_INSTALLED = _installed_places()


def _snapshot() -> None:
    """Record the namespaces of `_WATCHED` not yet recorded (a module pytest has not imported yet
    waits), with each function's code."""
    for module in _WATCHED:
        owner = sys.modules.get(module)
        if owner is None or (id(owner), module) in _harness:
            continue
        _record(owner, module)
        for name, value in list(vars(owner).items()):
            functions = isinstance(value, type) and any(_code_of(v) for v in vars(value).values())
            if functions and getattr(value, "__module__", None) == module:  # (its own, with code)
                _record(value, f"{module}.{name}")


class _Namespace:
    """A module's or a class's names as they were, and its functions' code: told apart from now in
    C (`itemgetter`, `map(is_)`), ~2,400 names of pytest's in ~50 us a check."""

    def __init__(self, owner: object, name: str) -> None:
        self.name, self.namespace = name, vars(owner)
        self.take()

    def take(self) -> None:
        """Record the namespace as it is now (again, once what changed in it has been judged)."""
        self.was = dict(self.namespace)
        if not hasattr(self, "first"):  # (what it was before any of the project's code: put back
            self.first = {k: (v, getattr(v, "__code__", None)) for k, v in self.was.items()}  # is no change)
        keys = (*self.was, "__ralph_none__", "__ralph_none__")  # (itemgetter of one key: no tuple)
        self.values = tuple(self.was.values())
        self.get = operator.itemgetter(*keys[: max(2, len(self.was))])
        self.functions = tuple(v for v in self.values if type(v).__name__ == "function")
        self.codes = tuple(f.__code__ for f in self.functions)
        self.code_was = {id(f): c for f, c in zip(self.functions, self.codes, strict=True)}

    def same(self) -> bool:
        try:
            now = self.get(self.namespace) if len(self.was) >= 2 else None
        except KeyError:
            return False
        if now is not None and not all(map(operator.is_, now, self.values)):
            return False
        return all(map(operator.is_, map(_code, self.functions), self.codes))

    def changes(self) -> Iterator[tuple[str, object, object]]:
        """Each name that changed: what it was, what it is (`_MISSING`: gone)."""
        for key, value in self.was.items():
            now = self.namespace.get(key, _MISSING)
            if now is not value or getattr(now, "__code__", None) is not self.code_was.get(id(value)):
                yield key, value, now


_code = operator.attrgetter("__code__")


def _record(owner: object, name: str) -> None:
    _harness[(id(owner), name)] = _Namespace(owner, name)


_plugins_found: list[str] = []  # where the installed pytest plugins lie (`_find_plugins`)


def _find_plugins(manager) -> None:
    """Record where the installed pytest plugins (loaded by entry point) lie, their packages or
    modules: once, when pytest has loaded them and before any of the project's code runs."""
    if _plugins_found:
        return
    try:
        found = [getattr(plugin, "__file__", None) for plugin, _ in manager.list_plugin_distinfo()]
    except Exception:  # (nothing is trusted as a plugin's then)
        found = []
    for file in found:
        if isinstance(file, str) and any(os.path.realpath(file).startswith(p) for p in _INSTALLED):
            file = os.path.realpath(file)
            _plugins_found.append(os.path.dirname(file) + os.sep if file.endswith("__init__.py") else file)
    _plugins_found.append(_HERE)  # (ours)


def _origin(obj: object) -> str:
    """Where the code behind `obj` lies: a function's (through the methods, class and static
    methods and properties around one), a callable's class's `__call__`, the first of a class's own
    functions that lies elsewhere than pytest's: the project's file (relative to it); "" for an
    installed pytest plugin's or ours; "!" for pytest's, the standard library's or another installed
    package's; "?" where nothing says (no code, code compiled from a string, a file anywhere else)."""
    if isinstance(obj, type):
        origins = [_origin(v) for v in list(vars(obj).values()) if _code_of(v) is not None]
        return next((o for o in origins if o != "!"), "!" if origins else "?")
    code = _code_of(obj)
    if code is None and callable(obj) and not isinstance(obj, type):
        code = _code_of(vars(type(obj)).get("__call__"))  # (a callable instance: its class's)
    named = getattr(code, "co_filename", None)
    file = _real_file(named) if isinstance(named, str) and os.path.isabs(named) else None
    if file is None:
        return "?"  # (`<string>`)
    if file.startswith(_HERE) or any(file == p or file.startswith(p) for p in _plugins_found):
        return ""
    if any(file.startswith(p) for p in _INSTALLED):
        return "!"
    for root in {_root(), os.path.join(os.path.realpath(_root() or "/"), "")} if _root() else ():
        if file.startswith(root):
            return file[len(root) :]
    return "?"


# A code's file -> the file it is with links resolved (None: no file there), as first found. The
# worker learns those of what it preloaded (`learn_places`), before any of the project's code runs;
# an answer kept is the one a later look would give unless the project's code moved a file since.
_places: dict[str, str | None] = {}


def _real_file(file: str) -> str | None:
    found = _places.get(file, _MISSING)
    if found is _MISSING:
        found = os.path.realpath(file) if os.path.isfile(file) else None
        _places[file] = found
    return found  # type: ignore[return-value]


def learn_places() -> None:
    """In the warm worker, once it has preloaded pytest, its plugins and the project's third-party
    modules: where their installed files are, so no test child resolves them again (most of the
    first harness check's 2.5 ms in a child). Only installed files: the project's may change."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.isabs(file) and file.endswith(".py"):
            real = os.path.realpath(file)
            if any(real.startswith(p) for p in _INSTALLED) and os.path.isfile(real):
                _places[file] = real


def _code_of(obj: object) -> object:
    for _ in range(4):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
        elif type(obj).__name__ == "method":
            obj = getattr(obj, "__func__", None)
        else:
            break
    return getattr(obj, "__code__", None) if type(obj).__name__ == "function" else None


def _check_harness(where: str) -> None:
    for watched in list(_harness.values()):
        if watched.same():
            continue
        for key, value, now in watched.changes():
            first = watched.first.get(key, (_MISSING, None))
            if now is first[0] and getattr(now, "__code__", None) is first[1]:
                continue  # (put back as it was: a test's monkeypatch undone)
            if not callable(value) and not callable(now):
                continue  # (data: a cache pytest fills as it goes)
            origin = _origin(now) if now is not value else "?"  # (the same function, other code)
            if not callable(value) and origin in ("", "!"):
                continue  # (a cache filled with pytest's own: doctest's checker class)
            _note(f"{watched.name}.{key} was replaced", where, origin)
        watched.take()  # (judged: a change is said once, a cache filled is quiet from now on)
    manager = getattr(getattr(_session, "config", None), "pluginmanager", None)
    for hook in _OUTCOME_HOOKS if manager is not None else ():
        for impl in getattr(manager.hook, hook).get_hookimpls():
            function = impl.function
            seen = _hooks_seen.get(id(function))
            if seen is not None and seen[0] is function:
                if getattr(function, "__code__", None) is not seen[1]:
                    _note(f"a {hook} hook's code was replaced", where, "?")
                continue
            _hooks_seen[id(function)] = (function, getattr(function, "__code__", None))
            origin = _origin(function)
            if origin not in ("", "!"):
                _note(f"a {hook} hook was added", where, origin)


def warm_harness() -> None:
    """In the readied child, while it waits for its request: compare each watched namespace and read
    each outcome hook once, the results dropped (nothing is judged, taken or noted). A freshly
    forked child's first comparison writes the reference count of every value it reads, copying
    ~900 of the worker's pages (2.7 ms, against 0.4 ms once they are the child's own:
    docs/measurements.md); done here, the wait pays for it instead of the first test's report."""
    for watched in list(_harness.values()):
        watched.same()
    manager = getattr(getattr(_session, "config", None), "pluginmanager", None)
    for hook in _OUTCOME_HOOKS if manager is not None else ():
        for impl in getattr(manager.hook, hook).get_hookimpls():
            _hooks_seen.get(id(impl.function))


def _note(what: str, where: str, origin: str) -> None:
    """Keep what changed, where the code that did it lies, and where it was first seen."""
    _changed.setdefault((what, origin), where)


def _check_test(item) -> None:
    """A test's function, code and class are the ones collected, and pytest's own `runtest` runs it."""
    runtest = vars(item).get("runtest")
    if runtest is not None:
        _note("a test's runtest was replaced", item.nodeid, _origin(runtest))
    seen = _tests_seen.get(item.nodeid)
    if seen is not None:
        obj = getattr(item, "obj", None)
        if obj is not seen[0]:
            _note("a test's function was replaced", item.nodeid, _origin(obj))
        elif getattr(obj, "__code__", None) is not seen[1]:
            _note("a test's code was replaced", item.nodeid, "?")
        if type(item) is not seen[2]:
            _note("a test's class was replaced", item.nodeid, _origin(type(item)))


def pytest_itemcollected(item) -> None:
    obj = getattr(item, "obj", None) if isinstance(item, pytest.Function) else None
    if obj is not None:
        _tests_seen[item.nodeid] = (obj, getattr(obj, "__code__", None), type(item))


def arm() -> None:
    """Take our settings out of the environment and open the report (once per test process; the
    warm runner's readied child calls it again when its request has set them)."""
    global _report_file
    if not os.environ.get("RALPH_REPORT"):
        return
    for name in _SETTINGS:
        value = os.environ.pop(name, None)
        if value is not None:
            _settings[name] = value
    _report_file = open(_settings["RALPH_REPORT"], "a", encoding="utf-8")  # noqa: SIM115
    _progress({"armed": True})  # (opens the progress file now, when there is one)
    global _guard
    if _settings.get("RALPH_GUARD"):  # read now, before any of the project's code has run
        with open(_settings["RALPH_GUARD"], encoding="utf-8") as f:
            _guard = frozenset(json.load(f))
    if _settings.get("RALPH_COVERAGE"):
        _watch_opens(_root())


def _watch_opens(root: str) -> None:
    """Record every file under `root` the run opens for reading (an audit hook: builtins.open,
    io.open_code and os.open all raise the "open" event; it cannot be removed, and it never fails
    the open it sees). Set before any conftest or test module is imported."""
    global _watching
    if _watching or not root:
        return
    _watching = True
    here = os.path.abspath(__file__)

    def hook(event, args):
        if event != "open":
            return
        with contextlib.suppress(Exception):  # an open of the project's must never fail for us
            _saw_open(root, here, args)

    sys.addaudithook(hook)


def _saw_open(root: str, here: str, args: tuple) -> None:
    path, mode, flags = (*args, None, None, None)[:3]
    if isinstance(path, int) or path is None:
        return
    if isinstance(mode, str):
        if "r" not in mode or any(c in mode for c in "wax+"):
            return
    elif (flags or 0) & os.O_ACCMODE != os.O_RDONLY:
        return
    full = os.path.normpath(os.path.join(os.getcwd(), os.fsdecode(path)))
    if not full.startswith(root) or full.endswith(_SKIPPED_OPENS) or any(c in full for c in _CACHES):
        return
    _opened.setdefault(full, set()).add(_opener(root, here))


def _opener(root: str, here: str) -> str:
    """The project's file whose code is running (the innermost frame under `root` that is not an
    installed package's, nor this plugin's), relative to `root`; or ""."""
    frame = sys._getframe(3)
    for _ in range(100):
        if frame is None:
            break
        name = frame.f_code.co_filename
        if name.startswith(root) and name != here and "-packages/" not in name:
            return name[len(root) :]
        frame = frame.f_back
    return ""


def _setting(name: str) -> str:
    return _settings.get(name, "")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    _snapshot()  # pytest's plugins are loaded, no conftest is
    _find_plugins(early_config.pluginmanager)
    arm()  # before any conftest (and what it imports of the project) loads


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """In a pytest-xdist worker of ours: the settings the controller sent (`pytest_configure_node`),
    taken before any conftest's own `pytest_configure` runs."""
    global _in_worker
    given = (getattr(config, "workerinput", None) or {}).get("ralph")
    if isinstance(given, dict):
        _in_worker = True
        _settings.update({k: str(v) for k, v in given.items() if k in _WORKER_SETTINGS})
        _as_python_m_pytest(config.workerinput.get("mainargv"))


def _as_python_m_pytest(argv: object) -> None:
    """In a worker: the command line and the `__main__` module its tests read are the controller's
    (`python -m pytest ARGS`, as the gate's worker arranged them), not execnet's `-c` and none."""
    import importlib.util
    import types

    if isinstance(argv, (list, tuple)) and argv:
        sys.argv = [str(a) for a in argv]
    spec = importlib.util.find_spec("pytest.__main__")
    main = types.ModuleType("__main__")
    main.__file__ = spec.origin if spec is not None else None
    main.__spec__, main.__package__ = spec, "pytest"
    sys.modules["__main__"] = main


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """In the controller: a worker runs its tests under our per-test limit and knows the project's
    root (its frames, where code that changed pytest's machinery lies); the report's path stays here."""
    if _report_file is not None:
        node.workerinput["ralph"] = {k: _settings[k] for k in _WORKER_SETTINGS if k in _settings}
        _workers[_worker_name(node)] = "it never handed back its summary"


def _worker_name(node) -> str:
    return str(getattr(getattr(node, "gateway", None), "id", "?"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    if not _xdist_collected:
        _phases["collected"] = _clock()
        _progress({"collected": len(ids)})
    _xdist_collected.update(ids)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """A worker went down: what it saw changed in pytest's machinery joins ours; one without its
    summary (a crash, a kill, `os._exit` in a test or at its session's end) is said in the closing
    record."""
    summary = (getattr(node, "workeroutput", None) or {}).get("ralph")
    if error is not None or not isinstance(summary, dict):
        _workers[_worker_name(node)] = " ".join(str(error or "it ended without its summary").split())[:300]
        return
    _workers[_worker_name(node)] = None
    for entry in summary.get("tampered", []):
        what, origin, where = [*map(str, entry), "?", "?", "?"][:3]
        _note(what, where, origin)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched) -> None:
    _crashed.append(str(crashitem))


def pytest_internalerror(excrepr, excinfo) -> None:
    """pytest-xdist's controller says a worker's internal error here, and goes on (its exit status
    does not show it)."""
    if _session is not None and _dsession(_session) is not None:
        # (xdist raises `assert False, the worker's traceback`: its last line is the error)
        lines = [line.strip() for line in str(getattr(excinfo, "value", "")).splitlines()]
        errors = [line for line in lines if line and line != "assert False"] or ["?"]
        _internal_errors.append(errors[-1][:300])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    global _session
    arm()
    _session = session
    _phases["start"] = _clock()


def _write(record: dict) -> None:
    if _report_file is None:
        return
    _report_file.write(_dumps(record) + "\n")
    _report_file.flush()


def _progress(record: dict) -> None:
    """For the host's progress line ($RALPH_PROGRESS, a file apart from the report: what it says
    decides nothing): how many tests were collected, which one starts. Opened once, when the
    settings are read (a test suite that patches `open` must not break it), and never an error."""
    global _progress_file
    path = _setting("RALPH_PROGRESS")
    if not path:
        return
    try:
        if _progress_file is None:
            _progress_file = _open(path, "a", encoding="utf-8")
        _progress_file.write(json.dumps(record) + "\n")
        _progress_file.flush()
    except (OSError, ValueError):
        pass


def pytest_collection_finish(session) -> None:
    _phases["collected"] = _clock()
    _progress({"collected": len(session.items)})


def pytest_runtest_logstart(nodeid, location) -> None:
    _progress({"started": nodeid})


def _message(report) -> str:
    """The failure as a drafter reads it: the project's frames (pytest's own `--tb` formatting, which
    re-parses each file, is switched off: docs/measurements.md) and the exception with
    pytest's assertion details."""
    text = report.longreprtext or ""
    frames = getattr(report, "_ralph_frames", [])
    if frames:
        root = _root()
        lines = ["Traceback (project frames, most recent call last):"]
        for path, lineno, name in frames:
            shown = path[len(root) :] if root and path.startswith(root) else path
            lines.append(f'  File "{shown}", line {lineno}, in {name}')
            source = linecache.getline(path, lineno).strip()
            if source:
                lines.append(f"    {source}")
        text = "\n".join(lines) + "\n" + text
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE // 4] + "\n[...]\n" + text[-3 * _MAX_MESSAGE // 4 :]
    return text


def _root() -> str:
    # Read when used, not at import: the warm runner imports this module before any request's env.
    return _setting("RALPH_COVERAGE_ROOT")


def _frames(call) -> list[list]:
    if call is None or call.excinfo is None:
        return []
    frames = []
    root = _root()
    for entry in call.excinfo.traceback:
        path = str(entry.path)
        if root and not path.startswith(root):
            continue
        frames.append([path, entry.lineno + 1, entry.name])
    return frames[-20:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report._ralph_frames = _frames(call) if report.failed else []
    if call.when == "call":
        _check_test(item)
        # A test that raised never passes (a skip or an xfail is skipped): a report that says it did
        # was rewritten after pytest made it. Whether it raised is what our call wrapper saw.
        report._ralph_raised = _raised.pop(item.nodeid, False) or call.excinfo is not None


def pytest_runtest_logreport(report) -> None:
    global _failed_seen
    if _report_file is None and not _in_worker:
        return
    written = report.when == "call" or report.failed or report.skipped
    if written:  # (what a record says: a passing setup or teardown says nothing)
        _check_harness(report.nodeid)
    if report.when == "call" and report.passed and getattr(report, "_ralph_raised", False):
        _note("a test raised but its report says it passed", report.nodeid, "?")
    _failed_seen += bool(report.failed)
    if written:
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                outcome = "xpassed" if report.passed else "xfailed"
            else:
                outcome = report.outcome
        else:
            outcome = "error" if report.failed else "skipped"
        _write(
            {
                "nodeid": report.nodeid,
                "outcome": outcome,
                "when": report.when,
                "duration": round(report.duration, 6),
                "message": _message(report) if report.failed else "",
                "frames": getattr(report, "_ralph_frames", []),
            }
        )
        _recorded.add(report.nodeid)
        _stop_early(report.nodeid, outcome)  # after its record is written


def _stop_early(nodeid: str, outcome: str) -> None:
    global _stopped
    if _session is None or _stopped is not None:
        return
    if outcome == "passed" and _setting("RALPH_STOP_ON_PASS"):
        _stopped = "pass"
    elif outcome in ("failed", "error") and nodeid in _guard:
        _stopped = "regression"
    if _stopped is not None:
        _session.shouldstop = f"ralph: stopped at the first {_stopped}"
        dsession = _dsession(_session)
        if dsession is not None:  # (pytest-xdist's controller reads its own flag, not the session's)
            dsession.shouldstop = _session.shouldstop


def _dsession(session):
    """pytest-xdist's controller, when this process is one."""
    return session.config.pluginmanager.getplugin("dsession")


def pytest_collectreport(report) -> None:
    global _failed_seen
    if _report_file is not None and report.failed:
        _failed_seen += 1
        _write(
            {
                "nodeid": report.nodeid or ".",  # the session itself: what is collected from the root
                "outcome": "error",
                "when": "collect",
                "duration": 0.0,
                "message": _message(report),
                "frames": [],
            }
        )


_named: tuple[object, frozenset[str], frozenset[str], frozenset[str]] | None = None


def _covers(whole: str, path: str) -> bool:
    """Whether a path argument (a file or a directory, `.` the root) takes in the file `path`."""
    whole = whole.rstrip("/")
    return whole in (".", "", path) or path.startswith(whole + "/")


def _named_tests(session) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """From the run's arguments: the files named only by test ids (`file::name...`), every id prefix
    those ids have (`file::Class`, `file::Class::test`, parameters dropped), and the ids as named
    (all below one of those is collected). Read once per session, at collection time (a readied
    child has its tests set by then)."""
    global _named
    if _named is None or _named[0] is not session:
        whole, files, prefixes, exact = [], set(), set(), set()
        for arg in session.config.args:
            path, sep, rest = str(arg).partition("::")
            if not sep:
                whole.append(path)
                continue
            files.add(path)
            parts = rest.split("[", 1)[0].split("::")
            prefixes.update(f"{path}::" + "::".join(parts[: i + 1]) for i in range(len(parts)))
            exact.add(f"{path}::" + "::".join(parts))
        only = {f for f in files if not any(_covers(w, f) for w in whole)}
        _named = (session, frozenset(only), frozenset(prefixes), frozenset(exact))
    return _named[1], _named[2], _named[3]


def _ignore_collect(collection_path, config):
    """What lies outside every path the run names, and above none of them, is not collected:
    pytest 8 makes a collector for each entry of each directory on its way to a named file (checking
    each against the ignore settings) only to drop it, a few ms of a one-test run
    (docs/measurements.md). Anything else is pytest's to decide. The one difference: an error in
    making such a collector (a conftest's `pytest_collect_file` that raises on a file beside the
    named one) no longer fails the run; the gate's whole run still meets it."""
    initial = getattr(_session, "_initialpaths", None)
    if _session is None or _session.config is not config or not initial:
        return None
    if collection_path in initial or collection_path in getattr(_session, "_initialpaths_with_parents", ()):
        return None
    global _initial_text
    if _initial_text[0] is not initial:
        _initial_text = (initial, frozenset(map(str, initial)))
    text, named = str(collection_path), _initial_text[1]
    while (parent := os.path.dirname(text)) != text:  # (below a path named: collected)
        if parent in named:
            return None
        text = parent
    return True


_initial_text: tuple[object, frozenset[str]] = (None, frozenset())


# pytest 7 asks it only about the `__init__.py` of each directory above a named file, which it
# must see (its package's setup and fixtures): nothing to save there.
if int(pytest.__version__.split(".")[0]) >= 8:
    pytest_ignore_collect = pytest.hookimpl(tryfirst=True)(_ignore_collect)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """A run that names its tests by id builds items for those alone: pytest would build (and
    parametrize) every function of each named module only to deselect them (docs/measurements.md).
    All of a class named whole is built (of a unittest class named by some of its tests, those:
    `pytest_make_collect_report`), and a file also named whole (or under a directory named) is
    collected whole; a test this drops by mistake reports nothing, which the host counts as an
    error."""
    if not _named_partly(collector):
        return None
    return None if f"{collector.nodeid}::{name}" in _named_tests(collector.session)[1] else []


def _named_partly(node) -> bool:
    """Whether the run names tests below `node` by id, but not `node` itself, a class around it (a
    class named whole is built whole, the classes nested in it too) or its whole file."""
    files, _, exact = _named_tests(node.session)
    nodeid = node.nodeid
    if not files or nodeid.partition("::")[0] not in files:
        return False
    if (known := _partly.get(nodeid)) is None or known[0] is not exact:  # (asked once per name in it)
        parts = nodeid.split("::")
        known = _partly[nodeid] = (
            exact,
            not any("::".join(parts[:i]) in exact for i in range(2, len(parts) + 1)),
        )
    return known[1]


_partly: dict[str, tuple[frozenset[str], bool]] = {}  # node id -> (the run's named ids, partly named?)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A unittest class named by some of its tests builds items for those alone (pyflakes' classes
    hold up to 140 tests: building them was half of a one-test run's collection). pytest's own
    collection runs, with unittest's loader giving it the named test methods of that class in its
    order (all of them where none of those is a test, so what is not found is reported as pytest
    would)."""
    unit = getattr(sys.modules.get("_pytest.unittest"), "UnitTestCase", None)
    if unit is None or not isinstance(collector, unit) or not _named_partly(collector):
        yield
        return
    import unittest

    prefixes = _named_tests(collector.session)[1]
    loader, target, nodeid = unittest.TestLoader, collector.obj, collector.nodeid
    original = loader.getTestCaseNames

    def named(self, case_class):
        found = original(self, case_class)
        if case_class is not target:
            return found
        kept = [name for name in found if f"{nodeid}::{name}" in prefixes]
        tests = [getattr(getattr(case_class, name, None), "__test__", True) for name in kept]
        return kept if any(tests) else found

    loader.getTestCaseNames = named
    try:
        yield
    finally:
        loader.getTestCaseNames = original


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    """With $RALPH_FIRST ({"tests": [node ids], "words": [...], "near": [node ids], "asked": [the
    node ids asked for, where the arguments name some by their class]}): tests that
    failed lately first, then those asked for by node id; in each group those in "near" (they ran a
    changed line) first, then by the rarest of the words its name contains, then in "near"'s order;
    the rest keep pytest's order. A broken candidate then fails on its first test or so, and -x
    stops the run there instead of after the whole module."""
    try:
        first = json.loads(_setting("RALPH_FIRST") or "{}")
    except ValueError:
        return
    failed = set(first.get("tests", []))
    words = [w.lower() for w in first.get("words", [])]
    near = {test: i for i, test in enumerate(first.get("near", []))}
    if not failed and not words and not near:
        return
    explicit = set(first.get("asked") or config.args)  # (the ids, where a class stands for its tests)
    names = {id(item): item.nodeid.partition("::")[2].lower() for item in items}
    count = {w: sum(w in name for name in names.values()) for w in words}
    unmatched = len(items) + 1  # (a list being sorted reads as empty)

    def rank(item) -> tuple[bool, bool, bool, int, int]:
        name = names[id(item)]
        rarest = min((count[w] for w in words if w in name), default=unmatched)
        narrow = near.get(item.nodeid, len(near))
        return item.nodeid not in failed, item.nodeid not in explicit, narrow == len(near), rarest, narrow

    items.sort(key=rank)


# Per-test coverage: coverage.py's C tracer when the target has it, else a sys.settrace fallback.
class _Tracer:
    def __init__(self, root: str) -> None:
        self.root = root
        self.lines: dict[str, set[int]] = {}
        self._cov = None
        try:
            import coverage

            # The project's own coverage settings must not change (or warn about) what we measure.
            self._cov = coverage.Coverage(
                data_file=None, include=[os.path.join(root, "*")], branch=False, config_file=False
            )
        except Exception:
            self._cov = None

    def start(self, nodeid: str) -> None:
        self.lines = {}
        if self._cov is not None:
            # Coverage's own warnings ("no data collected") must not fail a suite that makes
            # warnings errors: they say nothing about the project.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._cov.erase()
                self._cov.start()
        else:
            sys.settrace(self._trace)

    def stop(self) -> dict[str, set[int]]:
        if self._cov is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._cov.stop()
                data = self._cov.get_data()
                return {f: set(data.lines(f) or ()) for f in data.measured_files()}
        sys.settrace(None)
        return self.lines

    def _trace(self, frame, event, arg):
        filename = frame.f_code.co_filename
        if not filename.startswith(self.root):
            return None
        self.lines.setdefault(filename, set()).add(frame.f_lineno)
        return self._trace_lines

    def _trace_lines(self, frame, event, arg):
        if event == "line":
            self.lines.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return self._trace_lines


_tracer: _Tracer | None = None


def _traced(key: str):
    """A hookwrapper body: record the lines run while the wrapped hook runs under `key`."""
    global _tracer
    if not _setting("RALPH_COVERAGE"):
        yield
        return
    if _tracer is None:
        _tracer = _Tracer(_root())
    _tracer.start(key)
    try:
        yield
    finally:
        _lines_by_test[key] = _tracer.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Lines run while test modules are imported belong to no test: record them apart."""
    yield from _traced("<collection>")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield from _traced(item.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    path = _setting("RALPH_COVERAGE")
    if path:
        lines = {t: {fn: sorted(ls) for fn, ls in files.items()} for t, files in _lines_by_test.items()}
        lines["<opened>"] = {fn: sorted(openers) for fn, openers in _opened.items()}
        lines["<plugins>"] = {fn: [] for fn in _project_plugins(session)}
        lines["<tests>"], lines["<doctests>"] = _test_files(session)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(lines, f)
    if _in_worker:  # (xdist sends it to the controller once this hook is done)
        _check_harness("at the end")
        session.config.workeroutput["ralph"] = {"tampered": _tampered()}
    if _report_file is not None:
        _check_harness("at the end")
        collected, xdist = int(getattr(session, "testscollected", 0)), {}
        if _dsession(session) is not None:
            unreported = sorted(_xdist_collected - _recorded)
            # (xdist's controller collects nothing itself: a process that only claims to be one does)
            collected = max(collected, len(_xdist_collected))
            xdist = {
                "workers_lost": [f"{name}: {why}" for name, why in _workers.items() if why is not None],
                "crashed": _crashed,
                "internal_errors": _internal_errors,
                "unreported": len(unreported),
                "first_unreported": unreported[:5],
            }
        _write(
            {
                "end": True,
                "tampered": _tampered(),
                "exitstatus": int(exitstatus),
                "collected": collected,
                **({"xdist": xdist} if xdist else {}),
                "shouldstop": bool(getattr(session, "shouldstop", False)),
                "shouldfail": bool(getattr(session, "shouldfail", False)),
                "failed_seen": _failed_seen,
                "stopped": _stopped,
                "clock": [_phases["start"], _phases["collected"], _clock()],
            }
        )
        _report_file.close()
        if (
            _setting("RALPH_END_AT_FAILURE")
            and _failed_seen
            and int(exitstatus) == pytest.ExitCode.TESTS_FAILED
        ):
            _end_now(int(exitstatus))


def _end_now(code: int) -> None:
    """End the test process once a fail-fast run's closing record is written and a test failed: its
    verdict (a rejection) is known, and nothing pytest does after this (the terminal summary, two
    rounds of garbage collection while unconfiguring) could change it. A run that passed goes on:
    what happens at unconfigure (an error from an unraisable exception) still counts there."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _tampered() -> list[list[str]]:
    return [[what, origin, where] for (what, origin), where in _changed.items()]


def _test_files(session) -> tuple[dict[str, list], dict[str, list]]:
    """The files the session collected test functions from (pytest's and unittest's: not a lint
    plugin's item per file), and those it collected a module's doctests from."""
    tests: dict[str, list] = {}
    doctests: dict[str, list] = {}
    for item in getattr(session, "items", ()):
        path = str(getattr(item, "path", "") or "")
        if isinstance(item, pytest.Function):
            tests[path] = []
        elif type(item).__name__ == "DoctestItem":
            doctests[path] = []
    return tests, doctests


def _project_plugins(session) -> list[str]:
    """The project's own modules pytest loaded as plugins by name (`-p name`, `pytest_plugins`):
    they decide outcomes as a conftest does. Not one an installed distribution's entry point loads
    (a pytest plugin's own repository, installed editable: that module is the code under test)."""
    root, found = _root(), []
    manager = session.config.pluginmanager
    by_entry_point = {id(plugin) for plugin, _ in manager.list_plugin_distinfo()}
    for plugin in manager.get_plugins():
        if id(plugin) in by_entry_point:
            continue
        file = getattr(plugin, "__file__", None)
        if isinstance(file, str) and root and file.startswith(root) and "-packages/" not in file:
            found.append(file)
    return sorted(found)


# A per-test time limit: a test that loops forever (a buggy solution at the baseline, say) fails with
# a clear reason instead of holding the whole run until the run's own timeout.
class _TestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _TestTimeout(
        f"the test ran longer than {_setting('RALPH_TEST_TIMEOUT')} s (ralph's per-test limit)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    limit = float(_setting("RALPH_TEST_TIMEOUT") or 0)
    # (SIGALRM reaches the main thread alone: an xdist worker before 3.6 runs tests in another)
    timed = (
        limit > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if timed:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        outcome = yield
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    _raised[item.nodeid] = outcome.excinfo is not None


_snapshot()  # what is loaded now, with this module: before any of the project's code
