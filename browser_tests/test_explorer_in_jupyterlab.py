"""The explorer as a reader sees it: JupyterLab serves notebook 05, headless Chromium opens it, runs
it, and the explorer's widgets render and respond. Run by `make test-browser` (and .ci/run after
`make test`); needs Debian's chromium, driven by Playwright's Python API (never Playwright's own
browser download, so the test needs no network beyond Debian's packages)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("LENGEN_SCREENSHOTS", tempfile.gettempdir())) / "lengen-browser-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a free loopback port with a token, serving a copy of notebook 05 (so nothing
    it saves touches the committed notebook); shut down whatever happens."""
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / "05_inspect_attention.ipynb", root)
    port, token = free_port(), "lengen-test-token"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=None",
        "--allow-root",
    ]  # CI runs as root
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}") from None
                time.sleep(0.5)
        else:
            raise RuntimeError("JupyterLab did not answer in 60 s")
        yield url, token
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        for _ in range(20):  # the server and its kernels: none may outlive the test
            try:
                os.killpg(server.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            os.killpg(server.pid, signal.SIGKILL)
            pytest.fail("processes of the JupyterLab session outlived it")


def test_the_explorer_renders_and_responds_in_jupyterlab(lab):
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium package")
    url, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {SHOTS}")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/05_inspect_attention.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator, .jp-KernelStatus", timeout=60_000)
            page.click(".jp-Notebook")  # focus the notebook, then run every cell
            page.keyboard.press("Escape")
            page.click("text=Run", timeout=10_000)
            page.click("text=Run All Cells", timeout=10_000)
            labels = page.locator(".widget-label")
            page.wait_for_function("document.querySelectorAll('.widget-label').length >= 7", timeout=120_000)
            names = {t.strip() for t in labels.all_inner_texts()}
            assert {"task", "encoding", "seed", "layer", "head", "length n", "example"} <= names, names

            def view(want: str) -> dict:
                """The explorer's output once it shows a heatmap and text containing `want`."""
                return page.wait_for_function(
                    "(want) => { const o = document.querySelector('.lengen-explorer');"
                    " const img = o && o.querySelector('img');"
                    " return img && o.innerText.includes(want) ? {text: o.innerText, src: img.src} : null; }",
                    arg=want,
                    timeout=120_000,
                ).json_value()

            first = view("on-target")
            first_text, first_image = first["text"], first["src"]
            page.screenshot(path=str(SHOTS / "explorer-initial.png"), full_page=False)

            def set_slider(name: str, value: int) -> None:
                box = page.locator(".widget-hslider", has=page.locator(".widget-label", has_text=name)).first
                readout = box.locator(".widget-readout")
                readout.click()
                page.keyboard.press("Control+A")
                page.keyboard.type(str(value))
                page.keyboard.press("Enter")

            head = 3 if "H3" not in first_text else 2
            set_slider("head", head)
            set_slider("length n", 9)
            # the redrawn view: its printed title names the new head and length, and its heatmap is there
            after = view(f"H{head}, n=9")
            after_text, after_image = after["text"], after["src"]
            page.screenshot(path=str(SHOTS / "explorer-changed.png"), full_page=False)
            assert f"H{head}, n=9" in after_text, after_text
            assert after_image != first_image
            errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
            assert not [e for e in errors if "Traceback" in e or "Error" in e], errors
            assert "Traceback" not in page.locator(".jp-Notebook").inner_text()
        except Exception:
            page.screenshot(path=str(SHOTS / "explorer-failure.png"), full_page=False)
            raise
        finally:
            browser.close()
