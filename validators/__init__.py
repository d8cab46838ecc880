"""Verification: each check (syntax, ruff, mypy, pytest, custom commands, policy), the stages they
run as and the runner that sequences them (`stages`), test selection, coverage and failed-first
ordering, and the `Verifier` that judges candidates (`pipeline`).

May import ralph.domain and sandboxes; never ralph's loop, session or CLI (tests/test_architecture.py).
"""
