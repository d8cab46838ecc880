"""A validator: an edit may not add a print() call to the project's code."""

# --8<-- [start:stage]
import ast

from ralph.domain.results import Diagnostic, StageResult
from ralph.validators.plan import Entry
from ralph.validators.stages import Attempt


def prints(source: str | None) -> int:
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return 0  # (the syntax stage judges that)
    calls = (n for n in ast.walk(tree) if isinstance(n, ast.Call))
    return sum(isinstance(c.func, ast.Name) and c.func.id == "print" for c in calls)


class NoPrintStage:
    name = "no-print"

    def wanted(self, attempt: Attempt) -> bool:
        return any(c.path.endswith(".py") for c in attempt.candidate.changes)

    def run(self, attempt: Attempt) -> StageResult:
        changes = [c for c in attempt.candidate.changes if c.path.endswith(".py")]
        found = [
            Diagnostic(self.name, c.path, 1, "P001", "the edit adds a print() call")
            for c in changes
            if prints(c.after) > prints(c.before)
        ]
        return StageResult(
            self.name,
            ok=not found,
            duration_ms=0.0,
            detail="; ".join(f"{d.path}: {d.message}" for d in found) or "no print() added",
            diagnostics=found,
            checked=[(self.name, c.path) for c in changes],
        )


# --8<-- [end:stage]

# --8<-- [start:entry]
ENTRY = Entry("settled", lambda tools: NoPrintStage())
# --8<-- [end:entry]
