"""`akvc` with the fake backend, for pipeline tests: `python fake_akvc.py run CONFIG ...`.

Every backend call appends the run_id to $FAKE_AKVC_CALLS (if set), so a test can tell which
runs were really executed and which were no-ops. With $FAKE_AKVC_SLEEP a call lasts that many
seconds and appends "run_id start end backend" to $FAKE_AKVC_SPANS, so a test can see jobs overlap.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for foundation.*

from foundation.fake_run_backend import CountingFakeBackend

from agentic_kvc import cli, runs

_fake = CountingFakeBackend()


def _counting_backend(config, run_dir):  # type: ignore[no-untyped-def]
    calls = os.environ.get("FAKE_AKVC_CALLS")
    if calls:
        with open(calls, "a") as fh:
            fh.write(config.run_id() + "\n")
    start = time.time()
    time.sleep(float(os.environ.get("FAKE_AKVC_SLEEP", "0")))
    spans = os.environ.get("FAKE_AKVC_SPANS")
    if spans:
        with open(spans, "a") as fh:
            fh.write(f"{config.run_id()} {start} {time.time()} {config.backend}\n")
    return _fake(config, run_dir)


runs._backend_for = lambda _name: _counting_backend  # every backend name runs the fake

if __name__ == "__main__":
    cli.main()
