"""A loopback stand-in for an OpenAI-compatible model API, answering from a script.

Serves `.../chat/completions` (chat) and every other `.../completions` route (text completion and
fill-in-the-middle, e.g. Inception's `/v1/fim/completions`) on 127.0.0.1. Each request takes the next
scripted answer: replies (one choice per text) or an error status with an OpenAI-style error body.
Requests are recorded so tests can check what the drafter sent.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-cased names


@dataclass(frozen=True)
class _Answer:
    status: int
    texts: tuple[str, ...] = ()
    finish_reason: str = "stop"
    usage: tuple[int, int] = (120, 40)
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class FakeModelServer:
    """Use as a context manager; `base_url` is the `api_base` to give litellm."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._script: deque[_Answer] = deque()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        # A short poll interval: shutdown() waits for the next poll, 0.5 s by default, in every test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def reply(self, *texts: str, finish_reason: str = "stop", usage: tuple[int, int] = (120, 40)) -> None:
        """Answer the next request with one choice per text, however many it asked for."""
        self._script.append(_Answer(200, texts, finish_reason, usage))

    def fail(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        """Answer the next request with an error status and an OpenAI-style error body."""
        self._script.append(_Answer(status, message=message, headers=headers or {}))

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        if not self._script:
            return 500, {}, {"error": {"message": "no scripted answer left", "type": "server_error"}}
        answer = self._script.popleft()
        if answer.status != 200:
            error = {"message": answer.message, "type": "invalid_request_error", "param": None, "code": None}
            return answer.status, answer.headers, {"error": error}
        chat = path.endswith("/chat/completions")
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "finish_reason": answer.finish_reason,
            }
            if chat
            else {"index": i, "text": text, "finish_reason": answer.finish_reason, "logprobs": None}
            for i, text in enumerate(answer.texts)
        ]
        prompt, completion = answer.usage
        return (
            200,
            {},
            {
                "id": f"fake-{len(self.requests)}",
                "object": "chat.completion" if chat else "text_completion",
                "created": 1_700_000_000,
                "model": body.get("model", "fake"),
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            },
        )


def _handler(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            server.requests.append(Request(self.path, body, {k.lower(): v for k, v in self.headers.items()}))
            if not self.path.endswith("/completions"):
                status, headers, payload = 404, {}, {"error": {"message": f"no route {self.path}"}}
            else:
                status, headers, payload = server.answer(self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Handler
