"""Failed-first ordering: the tests the selected-test stage saw fail lately run first, as pytest's
--failed-first does, since the next candidate is most often broken the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ralph.domain.results import TestResult


class RecentFailures:
    """The last `keep` distinct tests seen failing, most recent last."""

    def __init__(self, keep: int = 20, probe_s: float = 0.05) -> None:
        self.keep, self.probe_s = keep, probe_s
        self._seen: dict[str, None] = {}

    def first(self, durations: Mapping[str, float]) -> list[str]:
        """What to run first, most recent first; a slow test (one that starts a process, say) is a
        poor first probe, however recent, so tests that took `probe_s` or more at the baseline are left out."""
        return [t for t in reversed(self._seen) if durations.get(t, 0.0) < self.probe_s]

    def saw(self, results: Iterable[TestResult]) -> None:
        for test in results:
            if test.failing:
                self._seen.pop(test.nodeid, None)
                self._seen[test.nodeid] = None
        while len(self._seen) > self.keep:
            del self._seen[next(iter(self._seen))]
