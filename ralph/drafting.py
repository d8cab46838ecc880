"""One iteration's drafting: the drafter asked (a remote one n times at once, its candidates verified
as they arrive), a failing draft made a rejected candidate rather than the run's failure, and only
new candidates passed on, cheapest to verify first."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from ralph.domain.candidate import Candidate, edit_size
from ralph.domain.errors import RalphError
from ralph.domain.protocols import DraftContext, Drafter
from ralph.memory import Memory


@dataclass
class Batch:
    """What an iteration asked of its drafter, and what it returned (new or not)."""

    asked: int = 1
    remote: bool = False  # a model behind an API: its candidates come one by one
    drafted: int = 0


def drafts(
    drafter: Drafter, context: DraftContext, batch: Batch, memory: Memory
) -> Iterator[tuple[Candidate, float]]:
    """The drafter's new candidates, each with the drafting time it cost. A local drafter's batch
    is sorted cheapest to verify first; a remote one (which may ignore a request for n) is asked n
    times at once, and each candidate is verified as soon as it arrives while the others are still
    being written."""
    memory.rejections.batch = set()
    start = time.perf_counter()
    if drafter.name in memory.health.down:  # it failed too often: nothing more to ask of it
        return
    if batch.remote and batch.asked > 1:
        one = functools.partial(ask, drafter, context, 1, memory)
        batches: Iterable[list[Candidate]] = _as_they_come(one, batch.asked, memory)
    else:
        drafted = ask(drafter, context, batch.asked, memory)
        batches = [sorted(drafted, key=verification_order) if len(drafted) > 1 else drafted]
    for drafted in batches:
        batch.drafted += len(drafted)
        memory.costs.add(drafted)
        for candidate in drafted:
            if memory.rejections.is_new(candidate):
                yield candidate, (time.perf_counter() - start) * 1000
                start = time.perf_counter()


def ask(drafter: Drafter, context: DraftContext, n: int, memory: Memory) -> list[Candidate]:
    """`drafter.draft`, where a failure (a model that timed out, a server that died or answered
    garbage) is that draft's failure, not the run's: an error candidate with the reason."""
    try:
        drafted = drafter.draft(context, n)
    except RalphError as exc:
        memory.health.failed(drafter.name, str(exc))
        return [Candidate(drafter.name, "the drafter failed", (), error=str(exc))]
    memory.health.answered(drafter.name)
    return drafted


def _as_they_come(ask: Callable[[], list[Candidate]], n: int, memory: Memory) -> Iterator[list[Candidate]]:
    """`ask()` (one candidate's draft) n times in parallel, each batch as soon as it is written. When
    the loop stops listening (an accept), the requests not yet sent are cancelled and those in flight
    are left to finish without holding the loop; what they cost is counted when they land."""
    pool = ThreadPoolExecutor(max_workers=n)
    futures = [pool.submit(ask) for _ in range(n)]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:
            if not future.done():
                future.add_done_callback(memory.costs.add_late)
        pool.shutdown(wait=False, cancel_futures=True)


def verification_order(candidate: Candidate) -> tuple[int, int]:
    """Cheapest to verify first: a parse error costs nothing, then edits touching fewer files
    (a file whose contents keep their length, a one-token swap, counts as none); among those, the
    smallest edit first (`edit_size`), the drafter's order kept between equals: when several of a
    batch would pass, the one accepted changes the least (a larger edit passing the same tests is
    likelier to be fitted to them)."""
    if candidate.error:
        return 0, 0
    files = 1 + sum(len(c.after or "") != len(c.before or "") for c in candidate.changes)
    return files, edit_size(candidate.changes)
