"""The loop's candidate handling: duplicates and known failures are never verified twice, the closest
rejected edit is handed to the next draft, and a remote drafter's candidates are verified as they come."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from ralph.config import RunConfig
from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.protocols import DraftContext
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS

GOOD = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
BAD = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k - 1)")
SEEN: list[DraftContext] = []


def edit(context: DraftContext, text: str, name: str) -> Candidate:
    before = (context.project / "windows.py").read_text()
    return Candidate("scripted", name, (FileChange("windows.py", before, text),))


class RepeatingDrafter:
    """Proposes the same bad edit twice per call, then the fix on the third call."""

    name = "scripted"
    remote, priced = False, True

    def __init__(self) -> None:
        self.calls = 0

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        SEEN.append(context)
        self.calls += 1
        if self.calls < 3:
            return [edit(context, BAD, "bad"), edit(context, BAD, "bad again")]
        return [edit(context, GOOD, "good")]


class SlowRemoteDrafter:
    """Each call takes 0.4 s and writes one candidate, like a model behind an API that ignores n;
    only the fourth call's is right. The loop should make the n calls at once."""

    name = "remote"
    remote, priced = True, True

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        assert n == 1, "a remote drafter is asked for one candidate per call"
        with self.lock:
            self.calls += 1
            call = self.calls
        time.sleep(0.4)
        return [edit(context, GOOD if call == 4 else BAD, f"call {call}")]


def test_duplicates_and_rejected_edits_are_verified_once(make_repo):
    import tests.test_loop as loaded  # the module the registry imports the drafter from

    seen = loaded.SEEN
    seen.clear()
    outcome = fix(
        make_repo(BUGGY_WINDOWS), RunConfig(drafter="tests.test_loop:RepeatingDrafter"), view=QuietView()
    )
    assert outcome.result.outcome == "goal"
    iterations = [r for r in read_trace(outcome.trace) if r["type"] == "iteration"]
    assert [len(r["candidates"]) for r in iterations] == [1, 0, 1]
    # The next draft is told what failed, and which rejected edit came closest.
    assert seen[1].best_rejected is not None and "len(xs) - k - 1" in seen[1].best_rejected[0]
    assert seen[1].attempts


def test_a_remote_drafter_is_asked_in_parallel(make_repo):
    start = time.monotonic()
    outcome = fix(
        make_repo(BUGGY_WINDOWS),
        RunConfig(drafter="tests.test_loop:SlowRemoteDrafter", candidates=4),
        view=QuietView(),
    )
    assert outcome.result.outcome == "goal"
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    assert first["accepted"] and first["candidates"][-1]["description"] == "call 4"
    assert first["draft_ms"] < 3 * 400  # four calls overlapped, not queued
    assert time.monotonic() - start < 20


class SlowTailDrafter:
    """A remote drafter whose first answer is right and quick; the other three take seconds."""

    name = "tail"
    remote, priced = True, True

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        with self.lock:
            self.calls += 1
            call = self.calls
        time.sleep(0.2 if call == 1 else 3.0)
        text = GOOD if call == 1 else BAD
        return [replace(edit(context, text, f"call {call}"), cost_usd=0.01)]


def test_after_an_accept_the_remote_requests_in_flight_do_not_hold_the_loop(make_repo):
    outcome = fix(
        make_repo(BUGGY_WINDOWS),
        RunConfig(drafter="tests.test_loop:SlowTailDrafter", candidates=4),
        view=QuietView(),
    )
    assert outcome.result.outcome == "goal"
    [first] = [r for r in read_trace(outcome.trace) if r["type"] == "iteration"]
    assert first["accepted"] and first["overhead_ms"] < 1500, first  # not the 3 s the others take
    assert first["cost_usd"] == 0.01  # the accepted draft's; the others land (and count) later
