"""A loopback stand-in for an OpenAI-compatible model API, answering from a script.

Serves `.../chat/completions` (chat) and every other `.../completions` route (text completion and
fill-in-the-middle, e.g. Inception's `/v1/fim/completions`) on 127.0.0.1. Each request takes the next
scripted answer: replies (one choice per text) or an error status with an OpenAI-style error body.
Requests are recorded so tests can check what the drafter sent. A server made with `respond` answers
every request the script does not with one choice, `respond(body)`, whatever the order requests
come in (several at once). A request with `"stream": true` is
answered with server-sent events, a few characters each, and the server records how much of each
stream it sent before the client hung up (`streams`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
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


@dataclass
class Stream:
    """What the server sent of one streamed answer."""

    chunks: int  # the answer's content chunks
    sent: int = 0  # how many of them the client took before it hung up (or all)
    hung_up: bool = False


class FakeModelServer:
    """Use as a context manager; `base_url` is the `api_base` to give litellm. A streamed answer is
    sent `chunk_chars` characters an event, `chunk_delay_s` apart."""

    def __init__(
        self,
        chunk_chars: int = 8,
        chunk_delay_s: float = 0.0,
        respond: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.requests: list[Request] = []
        self.respond = respond
        self.streams: list[Stream] = []
        self.chunk_chars = chunk_chars
        self.chunk_delay_s = chunk_delay_s
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
        if self._script:
            answer = self._script.popleft()
        elif self.respond is not None:  # an answer of its own to each request, in whatever order
            answer = _Answer(200, (self.respond(body),))
        else:
            return 500, {}, {"error": {"message": "no scripted answer left", "type": "server_error"}}
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


def _events(payload: dict[str, Any], size: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A chat answer as stream chunks: its content in pieces of `size` characters, then the finish
    reason; and the closing chunk with the usage."""
    base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = payload["choices"][0] if payload["choices"] else {"message": {"content": ""}}
    text = choice["message"]["content"]
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in pieces
    ]
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]}
    )
    return chunks, {**base, "choices": [], "usage": payload["usage"]}


def _handler(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            server.requests.append(Request(self.path, body, {k.lower(): v for k, v in self.headers.items()}))
            if not self.path.endswith("/completions"):
                status, headers, payload = 404, {}, {"error": {"message": f"no route {self.path}"}}
            else:
                status, headers, payload = server.answer(self.path, body)
            if status == 200 and body.get("stream") and self.path.endswith("/chat/completions"):
                self._stream(payload, bool((body.get("stream_options") or {}).get("include_usage")))
                return
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, payload: dict[str, Any], usage: bool) -> None:
            chunks, closing = _events(payload, server.chunk_chars)
            log = Stream(len(chunks) - 1)
            server.streams.append(log)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for i, chunk in enumerate([*chunks, *([closing] if usage else [])]):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    log.sent = min(i + 1, log.chunks)
                    time.sleep(server.chunk_delay_s)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except OSError:  # the client hung up
                log.hung_up = True

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Handler
