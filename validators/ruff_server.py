"""ruff kept running: `ruff server`, ruff's own language server, asked for one file's findings at a
time over the Language Server Protocol (stdin/stdout, `Content-Length` framing, JSON-RPC).

A `ruff check` process per candidate spends about half of its ~7 ms starting; the server answers the
same question about one file's text in ~2 ms (docs/measurements.md). It reads its settings from us
only (`configurationPreference: editorOnly`: the configuration file found at the start, or ralph's
rule set), never a configuration file found in the workspace. It runs no project code, so it runs
beside ralph like `ruff check` does.

This module is transport only: what the findings are worth is `RuffValidator`'s to decide (it trusts
them only where they agree with `ruff check`). Any failure (a server that does not start, dies,
answers late or answers nonsense) turns it off for good and `lint` answers None from then on.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.sandboxes.local import child_env


@dataclass(frozen=True)
class Asked:
    """A question sent to the server: its request id, and when its answer is due."""

    ident: int
    deadline: float


# One finding as the server reports it: rule code (None for a syntax error), 1-based line, message.
Finding = tuple[str | None, int, str]


class ResidentRuff:
    """One `ruff server` process, started at the first `lint`."""

    def __init__(self, binary: str, cwd: Path, settings: Mapping[str, Any]) -> None:
        self.binary, self.cwd, self.settings = binary, cwd, dict(settings)
        self.broken = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()
        self._versions: dict[str, int] = {}
        self._ids = 0
        self._answers: dict[int, dict[str, Any]] = {}  # answers read while waiting for another

    def lint(self, file: Path, text: str, timeout_s: float = 5.0) -> list[Finding] | None:
        """The server's findings in `text` as the content of `file` (an absolute path: the settings
        that apply, per-file ignores and exclusions, follow it); None when the server cannot say."""
        asked = self.ask(file, text, timeout_s)
        return None if asked is None else self.answer(asked)

    @property
    def running(self) -> bool:
        """Started (on whatever configuration the workspace had then), and not broken."""
        return self._proc is not None and not self.broken

    def ask(self, file: Path, text: str, timeout_s: float = 5.0) -> Asked | None:
        """Send the question and return at once (the server lints while we work); `answer` waits."""
        if self.broken:
            return None
        deadline = time.monotonic() + timeout_s
        try:
            if self._proc is None:
                self._start(deadline)
            return Asked(self._ask_lint(file.as_uri(), text, deadline), deadline)
        except (OSError, ValueError, KeyError, TypeError, TimeoutError):
            self._break()
            return None

    def answer(self, asked: Asked) -> list[Finding] | None:
        """The findings asked for; None when the server cannot say (it is then off for good)."""
        if self.broken:
            return None
        try:
            result = self._await(asked.ident, asked.deadline)
            if result.get("kind") != "full" or not isinstance(result.get("items"), list):
                raise ValueError(f"ruff server: unexpected diagnostic report {str(result)[:200]}")
            return [_finding(item) for item in result["items"]]
        except (OSError, ValueError, KeyError, TypeError, TimeoutError):
            self._break()
            return None

    def _break(self) -> None:
        self.close()
        self.broken = True

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._answers.clear()
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def _start(self, deadline: float) -> None:
        self._proc = subprocess.Popen(
            [self.binary, "server"],
            cwd=self.cwd,
            env=child_env({"RAYON_NUM_THREADS": "1"}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        os.set_blocking(self._proc.stdin.fileno(), False)
        # Pull diagnostics only: a client that cannot pull would be sent every lint unasked.
        capabilities = {"textDocument": {"diagnostic": {"dynamicRegistration": False}}}
        options = {"settings": self.settings}
        self._request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": capabilities,
                "initializationOptions": options,
            },
            deadline,
        )
        self._send({"jsonrpc": "2.0", "method": "initialized", "params": {}}, deadline)

    def _ask_lint(self, uri: str, text: str, deadline: float) -> int:
        version = self._versions.get(uri, 0) + 1
        self._versions[uri] = version
        if version == 1:
            document = {"uri": uri, "languageId": "python", "version": 1, "text": text}
            self._notify("textDocument/didOpen", {"textDocument": document}, deadline)
        else:
            self._notify(
                "textDocument/didChange",
                {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]},
                deadline,
            )
        return self._ask("textDocument/diagnostic", {"textDocument": {"uri": uri}}, deadline)

    def _notify(self, method: str, params: Mapping[str, Any], deadline: float) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params}, deadline)

    def _request(self, method: str, params: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        return self._await(self._ask(method, params, deadline), deadline)

    def _ask(self, method: str, params: Mapping[str, Any], deadline: float) -> int:
        self._ids += 1
        self._send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}, deadline)
        return self._ids

    def _await(self, ident: int, deadline: float) -> dict[str, Any]:
        while ident not in self._answers:
            message = self._receive(deadline)
            if "method" in message:  # the server's notice (ignored) or request (answered with nothing)
                if "id" in message:
                    self._send({"jsonrpc": "2.0", "id": message["id"], "result": None}, deadline)
            elif isinstance(message.get("id"), int):
                self._answers[message["id"]] = message
        message = self._answers.pop(ident)
        if "error" in message or not isinstance(message.get("result"), dict):
            raise ValueError(f"ruff server: request {ident} failed: {str(message)[:200]}")
        return message["result"]

    def _send(self, message: Mapping[str, Any], deadline: float) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        body = json.dumps(message).encode()
        data = memoryview(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        fd = self._proc.stdin.fileno()
        while data:
            _wait(fd, deadline, write=True)
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                continue

    def _receive(self, deadline: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                length = _content_length(bytes(self._buffer[:end]))
                if len(self._buffer) >= end + 4 + length:
                    body = bytes(self._buffer[end + 4 : end + 4 + length])
                    del self._buffer[: end + 4 + length]
                    message = json.loads(body)
                    if not isinstance(message, dict):
                        raise ValueError("ruff server: a message that is no object")
                    return message
            _wait(fd, deadline, write=False)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("ruff server: it closed its output")
            self._buffer += chunk


def _wait(fd: int, deadline: float, *, write: bool) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("ruff server: no answer in time")
    ready = select.select([], [fd], [], left)[1] if write else select.select([fd], [], [], left)[0]
    if not ready:
        raise TimeoutError("ruff server: no answer in time")


def _content_length(header: bytes) -> int:
    for line in header.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    raise ValueError("ruff server: a message without Content-Length")


def _finding(item: Any) -> Finding:
    code = item.get("code")
    line = item["range"]["start"]["line"]
    message = item["message"]
    if (
        not (code is None or isinstance(code, str))
        or not isinstance(line, int)
        or not isinstance(message, str)
    ):
        raise TypeError(f"ruff server: an unexpected diagnostic {str(item)[:200]}")
    return code, line + 1, message


def cli_message(message: str) -> str:
    """A server finding's message as `ruff check` prints it: the server adds the rule's help (the
    fix's title) after a blank line."""
    return message.split("\n\nhelp: ", 1)[0]


def server_settings(config: Path | None, rules: Sequence[str] | None) -> dict[str, Any]:
    """The settings that make the server judge as `ruff check` with `config_args(config)` and
    `--select=rules` does: that file (or none) and nothing the workspace holds."""
    settings: dict[str, Any] = {"configurationPreference": "editorOnly"}
    if config is not None:
        settings["configuration"] = str(config)
    if rules is not None:
        settings["lint"] = {"select": list(rules)}
    return settings
