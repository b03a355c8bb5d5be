"""Helpers for tests that start child processes, shared across test folders."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A child's `preexec_fn`: SIGINT back to its default action before exec.

    A shell that starts pytest in the background (`make test-all &`, nohup, a batch job)
    leaves SIGINT ignored, and an ignored signal stays ignored across exec: a child would never
    see the SIGINT a test sends for Ctrl-C (such a test passed only when something in the
    pytest process had installed a SIGINT handler first). A terminal's Ctrl-C reaches a
    default handler; this restores one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
