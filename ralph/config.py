"""Run configuration: `[tool.ralph]` in pyproject.toml or a ralph.toml, overridden by flags."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ralph.domain.candidate import POLICY_RULES, SEMANTIC_RULES
from ralph.domain.errors import RalphError


class ModelSettings(BaseModel):
    """Per-model settings for litellm drafters (`[tool.ralph.models."openai/my-model"]`)."""

    model_config = ConfigDict(extra="forbid")

    api_base: str | None = None
    """An OpenAI-compatible server for this model (SGLang, vLLM, Ollama, ...)."""
    api_key_env: str | None = None
    """The environment variable holding the key (the key itself never goes in a config file)."""
    timeout_s: float = 120.0
    """Per-call timeout."""
    temperature: float = 0.2
    """Sampling temperature."""
    max_tokens: int | None = None
    """Completion budget per call; none: a few times the code in question (256 to 4096)."""
    prompt: Literal["auto", "search-replace", "function"] = "auto"
    """The edit format asked for: SEARCH/REPLACE blocks, or the whole corrected function (what small
    models manage); auto: the function for a model served on this machine (a loopback api_base)."""
    stream: bool | None = None
    """Read chat replies as they are written (a served diffusion model streams each denoised block);
    none: on for the function prompt, which hangs up at the first complete function."""


class CheckSettings(BaseModel):
    """One check's settings, when `checks` is a table (`[tool.ralph.checks."python check.py"]`)."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] | None = Field(default=None, min_length=1)
    """Globs from the project root (`*` crosses `/`): the check runs for a candidate only when it
    touches one of these files (the baseline runs it always); none: for every candidate."""


class RunConfig(BaseModel):
    """Everything that shapes one `ralph fix` run."""

    model_config = ConfigDict(extra="forbid")

    task: str = ""
    """What the user asked for, in words (given to model drafters and recorded in the trace)."""
    tests: list[str] = Field(default_factory=list)
    """Target test node ids; empty means every test."""
    checks: list[str] = Field(default_factory=list)
    """Extra check commands run in the project directory; exit status 0 means pass. As a table of
    commands to their settings (CheckSettings), a check can say which files it looks at."""
    check_paths: dict[str, list[str]] = Field(default_factory=dict)
    """The files each check looks at (from the `checks` table): it runs only when they are touched."""
    drafter: str = "auto"
    """Drafter name: auto, mutation, replay:FILE, or module:Class."""
    deep: str | None = None
    """The deep reasoner: any litellm model string (anthropic/..., openai/..., ollama/...)."""
    router: str = "stall"
    """Routing policy: stall, fast, deep, cascade, or module:Class."""
    k: int = Field(default=3, ge=1)
    """Iterations without improvement before the stall router escalates."""
    fresh_start_after: int = Field(default=3, ge=0)
    """Iterations in a row on one state whose candidates were all rejected, after which drafters are
    no longer shown those attempts (the edits stay refused); 0: always shown."""
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    """Per-model settings (api_base, api_key_env, timeout, temperature)."""
    sampler: dict[str, Any] = Field(default_factory=dict)
    """Diffusion sampler settings (mode, steps, threshold, temperature, ...)."""
    candidates: int = Field(default=4, ge=1, le=64)
    """Candidates asked of the drafter per iteration."""
    max_iterations: int = Field(default=20, ge=1)
    """Stop after this many iterations."""
    max_seconds: float | None = Field(default=None, gt=0)
    """Stop after this much wall time."""
    max_cost: float | None = Field(default=None, ge=0)
    """Stop once paid models have cost this much (USD)."""
    types: bool | None = None
    """Run mypy: None means only when the project configures it."""
    allow_test_edits: bool = False
    """Let drafters edit test files."""
    include_untracked: bool = False
    """Commit untracked, not ignored files on the ralph branch too (they are in the workspace anyway)."""
    python: str | None = None
    """The target's interpreter (else its .venv, else ralph's)."""
    test_timeout_s: float = Field(default=60.0, gt=0)
    """One test's time limit: past it the test fails ("per-test limit") and the run goes on."""
    sandbox: bool = True
    """Run candidate code in a sandbox (`isolation`); False (--no-sandbox, RALPH_NO_SANDBOX=1) runs
    it unisolated, as `isolation = "local"` does."""
    isolation: str = "bwrap"
    """The sandbox candidate code runs in: bwrap (bubblewrap), local (rlimits, a new session and
    timeouts only), or a plugin's `module:Class` implementing ralph.domain's `Sandbox`."""
    background_gate: bool | None = None
    """Gate accepted states (the whole suite, every check) beside the loop; None: where 2+ cores are."""
    on_gate_failure: Literal["rollback", "todo"] = "rollback"
    """A background gate that finds tests the state broke: "rollback" undoes the state and every
    state built on it; "todo" keeps it as the loop's state, the regressed tests added to its
    remaining error, committed only with a later state whose gate passes. Any other gate failure
    (a check, a hang, no verdict) is a rollback either way."""

    semantic: Literal["reject", "warn", "off"] | None = None
    """Signs of a wrong fix that passes the tests (a parameter cut from the result, a failure
    swallowed, the failing test's values special-cased, a tested statement deleted, a parameter that
    becomes unused, ...): reject the candidate, only warn in the trace, or do not look. None: reject
    (or what the older name `plausibility` says)."""
    plausibility: Literal["reject", "warn", "off"] = "reject"
    """The older name of `semantic`."""
    semantic_off: list[str] = Field(default_factory=list)
    """The semantic rules this project turns off, by the code a rejection names (SEMANTIC_RULES)."""
    allow: list[str] = Field(default_factory=list)
    """Policy rules this project turns off (see POLICY_RULES): "harness" (pytest's internals and
    hooks in added lines: a pytest plugin's own code), "test-framework" (importing pytest into code
    that is not a test), "dynamic-code" (exec, imports by name, frames, getattr on a module by a
    computed name), "silencing" (noqa, type: ignore and their kind), "installed-files",
    "ignored-files" (writing into installed packages, or new files git ignores)."""
    api_changes: bool = False
    """Let a candidate change the public API of the project's package (remove or rename a public
    function, a parameter, a default); by default such a candidate is rejected, naming the break."""
    jobs: int | None = Field(default=None, ge=1, le=32)
    """Candidates verified at once, each on its own copy; None: a core each, one left for drafting
    (and one for the background gate)."""
    gate_workers: Annotated[int, Field(ge=0, le=64)] | Literal["auto"] = 0
    """pytest-xdist workers for the gate's whole-suite run (`-n N`), where the project's interpreter
    has pytest-xdist 3.6+ and its pytest settings leave xdist alone; 0 (the default): one process, as
    the user runs `pytest`; auto: with 4+ cores, half of them when the gate runs beside the loop, else
    each lane's share (2 at least). Off unless asked: code can tell a worker from `python -m pytest`
    (its environment names the worker), so a two-faced candidate could pass there and not for the user."""

    @model_validator(mode="before")
    @classmethod
    def _checks_table(cls, data: Any) -> Any:
        """`checks` given as a table: its commands, and the paths each declares."""
        if not isinstance(data, dict) or not isinstance(data.get("checks"), dict):
            return data
        table = data["checks"]
        settings = {}
        for command, value in table.items():
            if not isinstance(value, dict):
                raise ValueError(f'checks."{command}": expected a table such as {{ paths = ["config/*"] }}')
            try:
                settings[command] = CheckSettings.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f'checks."{command}".{where}: {first["msg"]}') from None
        paths = {command: s.paths for command, s in settings.items() if s.paths is not None}
        return {**data, "checks": list(table), "check_paths": paths}

    @field_validator("allow", "semantic_off")
    @classmethod
    def _known_rules(cls, value: list[str], info: ValidationInfo) -> list[str]:
        known = POLICY_RULES if info.field_name == "allow" else SEMANTIC_RULES
        unknown = [rule for rule in value if rule not in known]
        if unknown:
            raise ValueError(f"unknown rule {unknown[0]!r}: the rules are {', '.join(known)}")
        return value

    @property
    def semantic_mode(self) -> str:
        """reject, warn or off: `semantic`, else its older name `plausibility`."""
        return self.semantic or self.plausibility

    @property
    def chosen_sandbox(self) -> str:
        """The sandbox's name: `local` when isolation is turned off, else `isolation`."""
        return self.isolation if self.sandbox else "local"

    @property
    def gates_in_background(self) -> bool:
        return self.background_gate if self.background_gate is not None else usable_cores() >= 2

    @property
    def verify_jobs(self) -> int:
        jobs = self.jobs if self.jobs is not None else usable_cores() - 1 - self.gates_in_background
        return max(1, min(jobs, self.candidates))  # a lane per candidate at most

    @property
    def gate_worker_count(self) -> int:
        """The gate's pytest-xdist workers as configured (`gate_workers`), before the project's
        interpreter and settings are asked whether it can have them."""
        if self.gate_workers != "auto":
            return self.gate_workers
        cores = usable_cores()
        share = cores // 2 if self.gates_in_background else cores // self.verify_jobs
        return share if cores >= 4 and share >= 2 else 0


def usable_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_toml(file: Path) -> dict[str, Any]:
    """A ralph.toml's settings (bad input when unreadable)."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RalphError(f"{file}: unreadable config ({exc})") from None
    return {k.replace("-", "_"): v for k, v in data.items()}


def check_config(data: dict[str, Any]) -> RunConfig:
    """`data` as a RunConfig; an unknown key or a bad value is bad input, said in one line."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RalphError(f"invalid configuration: {where}: {first['msg']}") from None


def load_config(project: Path, overrides: dict[str, Any]) -> RunConfig:
    """Config from the project's files, then `overrides` (flags that were given) on top."""
    data: dict[str, Any] = {}
    for name in ("pyproject.toml", "ralph.toml"):
        file = project / name
        if not file.exists():
            continue
        try:
            parsed = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RalphError(f"{file}: unreadable config ({exc})") from None
        section = parsed.get("tool", {}).get("ralph", {}) if name == "pyproject.toml" else parsed
        if not isinstance(section, dict):
            raise RalphError(f"{file}: [tool.ralph] must be a table")
        data.update(section)
    if os.environ.get("RALPH_NO_SANDBOX", "") not in ("", "0"):
        data["sandbox"] = False
    data.update({k: v for k, v in overrides.items() if v is not None})
    return check_config({k.replace("-", "_"): v for k, v in data.items()})
