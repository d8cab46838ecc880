"""Per-state candidate queues, shared by the drafters that enumerate candidates lazily."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ralph.domain.candidate import Candidate
from ralph.domain.protocols import DraftContext


class CandidateQueue:
    """Candidates drawn lazily from `make(context)`, restarted whenever the state changes: each is
    proposed once per state, and edits the run already rejected are skipped."""

    def __init__(self, make: Callable[[DraftContext], Iterator[Candidate]]) -> None:
        self._make = make
        self._state_id: int | None = None
        self._queue: Iterator[Candidate] = iter(())
        self._proposed: set[str] = set()

    def take(self, context: DraftContext, n: int) -> list[Candidate]:
        """Up to `n` new candidates for `context`'s state; [] when the state is used up."""
        if context.state_id != self._state_id:
            self._state_id = context.state_id
            self._queue = self._make(context)
            self._proposed.clear()
        out: list[Candidate] = []
        for candidate in self._queue:
            key = f"error:{candidate.error}" if candidate.error else candidate.fingerprint
            if key in self._proposed or (not candidate.error and candidate.fingerprint in context.rejected):
                continue
            self._proposed.add(key)
            out.append(candidate)
            if len(out) >= n:
                break
        return out
