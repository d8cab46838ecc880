"""What a run remembers across iterations: the edits it rejected (never verified twice; models see
what failed and why), each drafter's health (one that keeps failing is not asked again) and the
cost ledger. Drafts may run in threads: what they touch is locked."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate
from ralph.domain.verdict import VerifyReport

DOWN_AFTER = 3  # iterations in a row whose every draft failed, after which a drafter is not asked again


@dataclass
class Rejections:
    """The fingerprints rejected this run, by the state they were judged on; the latest attempts and
    the one that came closest, for the next draft. The attempts shown are dropped after a number of
    rejected iterations in a row on one state (`end_round`): the fingerprints stay, so a repeat is
    still refused."""

    rejected: set[str] = field(default_factory=set)
    rejected_on: dict[int, set[str]] = field(default_factory=dict)
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (diff, why), latest last
    best: tuple[str, str] | None = None  # the rejected edit that came closest, for a repair
    best_remaining: int | None = None
    batch: set[str] = field(default_factory=set)  # fingerprints proposed in this iteration
    stand: int | None = None  # the state the streak below was counted on
    streak: int = 0  # iterations in a row on it whose candidates were all rejected

    def is_new(self, candidate: Candidate) -> bool:
        """False for an edit already rejected, or already proposed in this iteration's batch."""
        fingerprint = candidate.fingerprint
        if candidate.changes and (fingerprint in self.rejected or fingerprint in self.batch):
            return False
        self.batch.add(fingerprint)
        return True

    def reject(self, candidate: Candidate, report: VerifyReport, state: int = 0) -> None:
        """`candidate` was rejected against `state`."""
        self.rejected.add(candidate.fingerprint)
        self.rejected_on.setdefault(state, set()).add(candidate.fingerprint)
        entry = (candidate.diff or candidate.description, report.reason)
        self.attempts = [*self.attempts[-9:], entry]
        remaining = report.score.remaining if report.score is not None and candidate.changes else None
        if remaining is not None and (self.best_remaining is None or remaining < self.best_remaining):
            self.best, self.best_remaining = entry, remaining

    def end_round(self, stand: int, rejected: bool, fresh_start_after: int = 0) -> bool:
        """An iteration on state `stand` ended, with every candidate it verified `rejected` (or one
        accepted, or none verified). After `fresh_start_after` such iterations in a row on one state
        (0: never), the attempts and the closest one are dropped and the count starts again: a model
        shown its own failed attempts debugs worse with each one (most of its gain is gone after
        2-3), so the next draft starts fresh. Returns whether it did."""
        if stand != self.stand:
            self.stand, self.streak = stand, 0
        if not rejected:
            return False
        self.streak += 1
        if not fresh_start_after or self.streak % fresh_start_after:
            return False
        self.attempts, self.best, self.best_remaining = [], None, None
        return True

    def forget(self, states: set[int]) -> None:
        """States were undone (their gate failed): what was rejected only against them is not known
        to fail on the state the loop goes back to."""
        for state in states:
            self.rejected -= self.rejected_on.pop(state, set())
        for fingerprints in self.rejected_on.values():
            self.rejected |= fingerprints


@dataclass
class DrafterHealth:
    """Whether each drafter's drafts came this iteration; the drafters not asked again, and why."""

    failures: dict[str, int] = field(default_factory=dict)  # a drafter's failed iterations in a row
    down: dict[str, str] = field(default_factory=dict)
    _batch: dict[str, bool] = field(default_factory=dict)  # this iteration: drafter -> any draft came
    _why: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def failed(self, drafter: str, why: str) -> None:
        """A draft of `drafter` failed (called from the drafts' threads)."""
        with self._lock:
            self._batch.setdefault(drafter, False)
            self._why = why

    def answered(self, drafter: str) -> None:
        with self._lock:
            self._batch[drafter] = True

    def end_batch(self, drafter: str) -> str | None:
        """The iteration's drafting is over: an iteration in which every draft failed counts once
        (parallel requests to a busy server fail together); returns why, when that makes the drafter
        down (`DOWN_AFTER` such iterations in a row)."""
        with self._lock:
            came = self._batch.pop(drafter, None)
            if came is None or came:
                self.failures.pop(drafter, None)
                return None
            self.failures[drafter] = self.failures.get(drafter, 0) + 1
            if self.failures[drafter] < DOWN_AFTER or drafter in self.down:
                return None
            self.down[drafter] = self._why
            return self._why


@dataclass
class CostLedger:
    """What the drafts cost (those that land after the loop moved on included)."""

    unpriced_tokens: int = 0  # tokens of no known price (a local model): the cost is unknown, not zero
    _cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, batch: list[Candidate]) -> None:
        with self._lock:
            self._cost += sum(c.cost_usd or 0.0 for c in batch)
            self.unpriced_tokens += sum(c.tokens or 0 for c in batch if c.cost_usd is None)

    def add_late(self, future: Future[list[Candidate]]) -> None:
        """A draft that finished after the loop moved on (called from its thread)."""
        if not future.cancelled() and future.exception() is None:
            self.add(future.result())

    def spent(self) -> float:
        """What the drafts cost since the last call."""
        with self._lock:
            spent, self._cost = self._cost, 0.0
        return spent


@dataclass
class Memory:
    """Everything a run remembers."""

    rejections: Rejections = field(default_factory=Rejections)
    health: DrafterHealth = field(default_factory=DrafterHealth)
    costs: CostLedger = field(default_factory=CostLedger)

    @classmethod
    def resuming(cls, rejected: frozenset[str]) -> Memory:
        """A run that resumes another, whose rejections (against its start) stand."""
        return cls(Rejections(rejected=set(rejected), rejected_on={0: set(rejected)}))
