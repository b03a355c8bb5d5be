"""`akvc` with the fake backend, for pipeline tests: `python fake_akvc.py run CONFIG ...`.

Every backend call appends the run_id to $FAKE_AKVC_CALLS (if set), so a test can tell which
runs were really executed and which were no-ops.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for foundation.*

from foundation.fake_backend import CountingFakeBackend

from agentic_kvc import cli, runs

_fake = CountingFakeBackend()


def _counting_backend(config, run_dir):  # type: ignore[no-untyped-def]
    calls = os.environ.get("FAKE_AKVC_CALLS")
    if calls:
        with open(calls, "a") as fh:
            fh.write(config.run_id() + "\n")
    return _fake(config, run_dir)


runs._backend_for = lambda _name: _counting_backend  # every backend name runs the fake

if __name__ == "__main__":
    cli.main()
