"""The validators one verifier drives on one copy of the project: built from its toolchain, the
settings and (once measured) the baseline's facts, so that a lane's are built exactly like the
loop's."""

from __future__ import annotations

from dataclasses import dataclass

from ralph.validators.api import ApiValidator
from ralph.validators.command import CommandValidator
from ralph.validators.facts import BaselineFacts, VerifySettings
from ralph.validators.format import FormatValidator, formats_with_ruff
from ralph.validators.mypy import MypyValidator
from ralph.validators.plausibility import PlausibilityValidator
from ralph.validators.pytest_run import PytestValidator, gate_tests
from ralph.validators.ruff import RuffValidator
from ralph.validators.syntax import SyntaxValidator
from ralph.validators.toolchain import Toolchain
from ralph.validators.warm import WarmRunner, candidates_runner


@dataclass
class Tools:
    """Each check's validator, on `toolchain`'s copy of the project."""

    toolchain: Toolchain
    syntax: SyntaxValidator
    ruff: RuffValidator
    format: FormatValidator
    plausibility: PlausibilityValidator
    api: ApiValidator
    mypy: MypyValidator | None
    warm: WarmRunner | None
    tests: PytestValidator  # the targeted tests (in the warm worker)
    gate: PytestValidator  # the whole suite, in a fresh child of the gate's own worker
    checks: CommandValidator

    @classmethod
    def build(
        cls, toolchain: Toolchain, settings: VerifySettings, protected: tuple[str, ...], facts: BaselineFacts
    ) -> Tools:
        """The validators, with what the baseline found unusable off (`facts.disabled`)."""
        checks = list(settings.checks)
        ruff = RuffValidator(toolchain, resident=True)
        formats = formats_with_ruff(toolchain.project, checks) if settings.formatting else None
        warm = candidates_runner(toolchain, protected) if settings.warm else None
        tools = cls(
            toolchain,
            # The workspace is ours: the bytecode of a compiled candidate can serve the tests' imports.
            syntax=SyntaxValidator(toolchain, write_bytecode=toolchain.reads_our_bytecode),
            ruff=ruff,
            format=FormatValidator(toolchain, ruff.binary, formats),
            plausibility=PlausibilityValidator(
                toolchain, ruff.binary, settings.plausibility, off=settings.semantic_off
            ),
            api=ApiValidator(toolchain.project, allowed=settings.api_changes),
            mypy=MypyValidator(toolchain) if settings.types and "mypy" not in facts.disabled else None,
            warm=warm,
            tests=PytestValidator(toolchain, warm=warm, test_timeout_s=settings.test_timeout_s),
            gate=gate_tests(toolchain, settings.warm, settings.test_timeout_s, settings.gate_workers),
            checks=CommandValidator(toolchain, checks, settings.check_paths),
        )
        tools.disable(facts.disabled)
        return tools

    def disable(self, disabled: dict[str, str]) -> None:
        """Turn off what the baseline could not run (the type checker is stopped)."""
        if "ruff" in disabled:
            self.ruff.enabled = False
        if "format" in disabled:
            self.format.how = None
        if "mypy" in disabled:
            self.close_types()

    def trust(self, trusted: tuple[str, ...] | None, known: frozenset[tuple[str, str]]) -> None:
        """Whose changes to pytest's machinery are the project's own, and what the baseline changed."""
        for tests in (self.tests, self.gate):
            tests.trusted, tests.known = trusted, known

    def close_types(self) -> None:
        if self.mypy is not None:
            self.mypy.close()
            self.mypy = None

    def close(self) -> None:
        """Stop the warm runners (and anything they still run) and the type checker."""
        for runner in (self.warm, self.gate.warm):
            if runner is not None:
                runner.close()
        self.close_types()
        self.ruff.close()
