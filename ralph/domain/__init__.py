"""The domain: plain types every layer shares, and the Protocols between the layers.

`candidate` (an edit: Candidate, FileChange), `results` (what verification observes: ProcessResult,
TestResult, Diagnostic, StageResult, Scope), `score` (Observation, Score and the pure scoring
functions), `verdict` (VerifyReport), `protocols` (Drafter, Router, Sandbox, Validator and the
loop's collaborators), `events` (the trace's record shapes), `errors`.

A leaf: it imports the standard library only, never another package of ours (tests/test_architecture.py).
"""
