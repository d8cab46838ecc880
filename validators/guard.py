"""Which edits may be verified at all: the policy's rules (validators/policy.py) applied with what
the project's settings and the baseline say its tests are."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

from ralph.domain.candidate import PROTECTED_TESTS, Candidate, is_protected
from ralph.validators.facts import BaselineFacts, VerifySettings
from ralph.validators.mypy import plugin_files
from ralph.validators.policy import (
    allowed_rules,
    check_scripts,
    git_ignored,
    info_exclude,
    interpreter_prefix,
    project_tests,
    refusal,
)
from ralph.validators.toolchain import Toolchain


class EditPolicy:
    """What the project's tests are (PROTECTED_TESTS and what its pytest settings say); what no
    candidate may edit (those, unless test edits are allowed: the settings' `protected` empty); the
    policy's rules the project allows; the interpreter's prefix when it lies inside the project."""

    def __init__(self, toolchain: Toolchain, settings: VerifySettings) -> None:
        self.toolchain = toolchain
        self.only = settings.only
        self.test_globs = (*PROTECTED_TESTS, *project_tests(toolchain.project, toolchain.root))
        globs = settings.protected
        self.protected = tuple(dict.fromkeys((*globs, *self.test_globs))) if globs else ()
        allow = settings.allow
        self.allow = tuple(allow) if allow is not None else allowed_rules(toolchain.project)
        self.installed = interpreter_prefix(toolchain.python, toolchain.project)
        # Type-checker plugins and the scripts the checks run decide verdicts: never edited.
        checks = list(settings.checks)
        self.plugin_files = plugin_files(toolchain.project) + check_scripts(toolchain.project, checks)

    def trusted(self, protected: tuple[str, ...]) -> tuple[str, ...] | None:
        """Whose changes to pytest's machinery are the project's own: its tests as the policy protects
        them (None, everyone's, where the project allows the harness rule)."""
        return None if "harness" in self.allow else (protected or (*PROTECTED_TESTS, *self.test_globs))

    def is_test_file(self, path: str, test_files: Collection[str]) -> bool:
        """A file pytest collected tests from at the baseline, or one named like a test file."""
        return path in test_files or is_protected(path, self.test_globs)

    def refusal(self, candidate: Candidate, facts: BaselineFacts) -> str | None:
        """Why the candidate may not be verified at all, or None."""
        return refusal(
            candidate.changes,
            facts.protected,
            self.only,
            self.plugin_files,
            tests=self.test_globs,
            allow=self.allow,
            installed=self.installed,
            ignored=self._ignored,
            doctests=facts.doctest_files,
        )

    @functools.cached_property
    def _excludes(self) -> str:
        """The user's repository's `.git/info/exclude` (the copy has no `.git/info` of its own)."""
        return info_exclude(self.toolchain.user_root)

    def _ignored(self, paths: Sequence[str]) -> list[str]:
        """Which of these project paths git ignores, asked in the repository's copy (whose
        `.gitignore` files no candidate may edit)."""
        root, project = self.toolchain.root or self.toolchain.project, self.toolchain.project
        if not project.is_relative_to(root):
            root = project
        prefix = "" if root == project else project.relative_to(root).as_posix() + "/"
        ignored = set(git_ignored(root, [prefix + p for p in paths], self._excludes))
        return [p for p in paths if prefix + p in ignored]
