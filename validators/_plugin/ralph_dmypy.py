"""A resident dmypy client, run by the target's interpreter: `python ralph_dmypy.py STATUS_FILE`.

`python -m mypy.dmypy run` spends ~80 ms importing its client before the daemon's recheck (often a
few ms) even starts. This process imports it once, then serves one JSON line per check: {"args":
[...]} -> the daemon's {"out", "err", "status"}, or {"fallback": reason} when the daemon is not
running, asks for a restart or refuses the request: the caller then runs `dmypy run` itself, which
starts or restarts the daemon. Depends on nothing but the standard library and mypy.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from mypy.dmypy.client import is_running, request
    from mypy.version import __version__

    status_file = sys.argv[1]
    # Our replies alone on stdout: what the daemon prints (a plugin's print, its debug output)
    # is written by `request` to sys.stdout, so that becomes stderr.
    out = sys.stdout
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            args = json.loads(line)["args"]
            if not is_running(status_file):
                reply: dict = {"fallback": "the daemon is not running"}
            else:
                response = request(status_file, "run", version=__version__, args=args, export_types=False)
                if "restart" in response or "error" in response or "status" not in response:
                    reason = response.get("restart") or response.get("error") or "no status"
                    reply = {"fallback": str(reason)}
                else:
                    reply = {k: response.get(k, "") for k in ("out", "err", "status")}
        except Exception as error:  # a client this old or new speaks otherwise: use the CLI
            reply = {"fallback": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
