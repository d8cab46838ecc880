"""The resident type checker, run inside the sandbox by the target's interpreter with `-I`:
`python -I ralph_types.py`.

It holds mypy's fine-grained incremental checker in this process (what the `dmypy` daemon holds, but
without forking a daemon, a status file, a socket or a pid anyone else could rewrite) and serves one
JSON line per check: {"args": [...]} -> {"out", "err", "status"}, or {"error": reason} when mypy could
not give a verdict. `-I` keeps the project's directory and PYTHON* variables off its path, so a
`sitecustomize.py` in the workspace never runs here. Depends on nothing but the standard library and mypy.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    from mypy.dmypy_server import Server, process_start_options
    from mypy.version import __version__

    out = sys.stdout
    sys.stdout = sys.stderr  # what mypy or a plugin prints must not reach our replies
    server = None
    status_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ralph-types-status.json")
    out.write(json.dumps({"ready": True, "version": __version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            args = list(json.loads(line)["args"])
            reply: dict = {}
            for _attempt in range(2):
                if server is None:
                    server = Server(process_start_options(args, allow_sources=True), status_file)
                data = {
                    "version": __version__,
                    "args": args,
                    "export_types": False,
                    "is_tty": False,
                    "terminal_width": 120,
                }
                reply = server.run_command("run", data)
                if "restart" not in reply:
                    break
                server = None  # options or plugins changed: a fresh checker, once
            if "status" in reply and "restart" not in reply:
                reply = {k: reply.get(k, "") for k in ("out", "err", "status")}
            else:
                reply = {"error": str(reply.get("restart") or reply.get("error") or "no status")}
        except SystemExit as exc:  # bad options or config: mypy exits while parsing them
            reply = {"error": f"mypy exited ({exc.code}) while reading its options"}
        except BaseException as exc:  # an internal error or a crashing plugin: no verdict
            server = None
            tail = traceback.format_exc().strip().splitlines()[-3:]
            reply = {"error": f"{type(exc).__name__}: {exc} | " + " | ".join(tail)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
