"""The skips `bash .ci/run` allows (AAYN_STRICT=1), each as (test ids, a shell-style pattern; the reason, a regular
expression) with a comment saying why it is allowed. Any other skip fails the run (skip_report.py)."""

ALLOWED = []
