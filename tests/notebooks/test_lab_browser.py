"""`make lab` in a real browser: JupyterLab opens notebooks/explore.py as a notebook with the
project's `akvc` kernel, runs every cell, and draws a figure.

Headless Chromium from Debian's package (`chromium`, what `make system` installs), driven by
Playwright (the PyPI wheel; its own browser download is never used: `executable_path` names
the system one). The screenshot of the finished notebook is kept at
results/test_artifacts/lab_explore.png. If the kernel is not registered (`make jupyter`), Lab
opens the notebook with no kernel and the test fails on the kernel's name. Slow: Lab's start,
the page, and explore.py over this checkout's results (a minute or two on a busy machine).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACT = REPO / "results" / "test_artifacts" / "lab_explore.png"
KERNEL_NAME = "Python 3 (agentic_kvc)"  # the display name `make jupyter` registers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium: `make system` installs Debian's package"
    ),
    pytest.mark.skipif(shutil.which("make") is None, reason="`make lab` needs make"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """`make lab` on loopback with a random token; the URL of explore.py in it. Lab's own
    state (checkpoints, workspace, user settings with autosave off) goes to tmp_path, so the
    checkout is left as it was: explore.py is never saved back."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp_path / "settings" / "@jupyterlab" / "docmanager-extension"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    args = (
        f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
        f" --FileCheckpoints.checkpoint_dir={tmp_path / 'checkpoints'}"
        f" --LabApp.user_settings_dir={tmp_path / 'settings'}"
        f" --LabApp.workspaces_dir={tmp_path / 'workspaces'}"
    )
    if os.geteuid() == 0:
        args += " --allow-root"
    log = (REPO / "results" / "test_artifacts").resolve()
    log.mkdir(parents=True, exist_ok=True)
    with (log / "lab.log").open("w") as out:
        proc = subprocess.Popen(
            ["make", "-s", "lab", f"LAB_ARGS={args}"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped with everything it started
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (log / "lab.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "Lab did not answer in 180 s"
                time.sleep(1)
        yield f"{base}/lab/tree/explore.py?reset&token={token}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_explore_runs_in_lab_with_the_akvc_kernel(lab: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # Root in a container: no user namespaces for Chromium's sandbox; small /dev/shm.
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab)
            notebook = page.locator(".jp-NotebookPanel").first
            expect(notebook).to_be_visible(timeout=120_000)
            # The kernel the notebook's metadata names (akvc), started: its display name in
            # the toolbar. Unregistered, Lab shows "No Kernel" (after a kernel picker).
            kernel = notebook.locator(".jp-KernelName, .jp-Toolbar-kernelName").first
            expect(kernel).to_have_text(KERNEL_NAME, timeout=120_000)
            idle = notebook.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            expect(idle).to_have_count(1, timeout=120_000)

            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            # Every code cell ran ([n], not [*] or [ ]) and the kernel went idle again.
            figure = notebook.locator(".jp-OutputArea-output img")
            expect(figure.first).to_be_visible(timeout=600_000)
            expect(notebook.locator(".jp-InputArea-prompt", has_text="[*]")).to_have_count(
                0, timeout=600_000
            )
            expect(idle).to_have_count(1, timeout=60_000)
            errors = notebook.locator(".jp-OutputArea-output[data-mime-type*='error']")
            assert errors.count() == 0, errors.first.inner_text()[:2000]
            assert figure.count() >= 1
            box = figure.first.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 100
            figure.first.scroll_into_view_if_needed()
        finally:
            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACT), full_page=False)
            browser.close()
