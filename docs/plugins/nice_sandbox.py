"""A sandbox: the local sandbox (rlimits, a new session, timeouts), with every command at the lowest
CPU priority, so that candidate code never slows the machine's other work. It isolates no more than
`--no-sandbox` does: an example of the Protocol, not a boundary."""

from collections.abc import Mapping, Sequence
from pathlib import Path

from ralph.domain.protocols import Command
from ralph.domain.results import ProcessResult
from ralph.sandboxes.local import LocalSandbox

NICE = ("nice", "-n", "19")


class NiceSandbox:
    name = "nice"
    mount_at = None  # its commands see the workspace at its own path

    def __init__(self, workspace: Path, writable: Sequence[Path] = (), workspace_writable: bool = True):
        self.local = LocalSandbox()

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult:
        return self.local.run([*NICE, *argv], cwd=cwd, env=env, timeout_s=timeout_s, stdin=stdin)

    def wrap(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None) -> Command:
        return self.local.wrap([*NICE, *argv], cwd=cwd, env=env)  # the warm worker, the type checker

    def cancel(self) -> None:
        self.local.cancel()

    def close(self) -> None:
        self.local.close()

    def mounted_at(self, path: Path) -> "NiceSandbox | None":
        return None  # it cannot show the workspace elsewhere

    def prepare(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[Path]:
        return []  # no mount points to make

    def inside(self, text: str) -> str:
        return text  # paths are the same inside and out

    def outside(self, text: str) -> str:
        return text
