"""End to end, in a real browser: JupyterLab + headless Chromium render the section panel.

Starts ``jupyter lab`` on a free loopback port over a copy of ``tests/browser/panel_demo.ipynb``,
opens it in Debian's Chromium driven by Playwright (``executable_path``, no browser download), runs
all cells from the Run menu, and checks what a learner sees under the ``%%hpu_section`` cell:

- the five tabs Graph | Timeline | Recompiles | Metrics | Advice, and the panel's "finished" status;
- the timeline: a PNG <img> that decoded (non-zero natural size) and is drawn on the page;
- Recompiles names the new input shape, Advice gives advice, Graph draws an image;
- no cell failed, no "Error displaying widget", and no JavaScript error (console or uncaught),
  except the exact messages in ``BENIGN_CONSOLE_ERRORS``.

Screenshots (the whole page and each tab of the panel) go to ``artifacts/browser/`` under the repo
root (gitignored); the path is printed. Every wait is bounded and jupyter and the browser are
always shut down, so a failure cannot hang CI. Skipped only when Chromium or Playwright is missing
(``make test`` installs Chromium). Run alone: ``.venv/bin/python -m pytest tests/widgets/test_browser_lab.py -s``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]   # tests/
ROOT = HERE.parent
NOTEBOOK = HERE / "browser" / "panel_demo.ipynb"
LAB_CONFIG = ROOT / "lab" / "jupyter_lab_config.py"
ARTIFACTS = ROOT / "artifacts" / "browser"
TABS = ["Graph", "Timeline", "Recompiles", "Metrics", "Advice"]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

# Console errors that are not JavaScript errors of the lab or the panel: (pattern, why it is benign),
# matched against the whole console text with re.fullmatch, so nothing else slips through. Empty:
# with the server's update check and news feed off (see Lab.start) JupyterLab 4 logs no error here,
# offline. Add an entry only for a message understood to be harmless, with the reason.
BENIGN_CONSOLE_ERRORS: list = []

SERVER_START_S = 45         # jupyter lab answering on its port
PAGE_LOAD_S = 45            # the lab page showing the notebook's cells
KERNEL_READY_S = 45         # kernel started and idle
RUN_ALL_S = 60              # all cells executed and the panel finished (~5-13 s on a loaded 2-core box)
STEP_S = 15                 # any single UI wait
# and pytest-timeout stops the whole test after 150 s (typically it takes 20-35 s)


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def _die_with_parent() -> None:
    """In the jupyter child, before exec: get SIGTERM if pytest dies (even by SIGKILL), so a killed
    test run leaves no server or kernel behind (Linux prctl PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- jupyter lab

class Lab:
    """``jupyter lab`` on a loopback port, with its own config/data/runtime/settings dirs."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "jupyter.log"
        self.proc = None
        self._log = None
        home.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not (k.startswith("JUPYTER") or k.startswith("IPYTHON"))}
        for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"), ("IPYTHONDIR", "ipython")]:
            (self.home / sub).mkdir(parents=True, exist_ok=True)
            env[var] = str(self.home / sub)
        # The venv's tools first (the kernel is the server's own python: sys.executable).
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        return env

    def start(self) -> None:
        # the lab's own settings, as `make lab` gives them to learners (no news prompt, no update
        # check from the page or the server: the network is closed in CI); the root is the copy
        cmd = [sys.executable, "-m", "jupyter", "lab", f"--config={LAB_CONFIG}", "--no-browser",
               "--ServerApp.ip=127.0.0.1", "--ServerApp.token=", "--ServerApp.password=", "--allow-root",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=self.env(), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"jupyter lab did not answer within {SERVER_START_S} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM the server (it shuts its kernels down), then SIGKILL its process group."""
        if self.proc is not None and self.proc.poll() is None:
            for kill, wait in ((lambda: self.proc.terminate(), 20),
                               (lambda: os.killpg(self.proc.pid, signal.SIGKILL), 5)):
                try:
                    kill()
                    self.proc.wait(timeout=wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()

    def kernel_state(self, notebook: str) -> str | None:
        """The execution state the server knows for the notebook's kernel (None: no session yet)."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=5) as r:
                sessions = json.load(r)
        except OSError:
            return None
        for s in sessions:
            if s.get("path", "").endswith(notebook) and s.get("kernel"):
                return s["kernel"].get("execution_state")
        return None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


# ----------------------------------------------------------------------------- the page

JS_KERNEL_STATUS = """() => {
  const el = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  return el ? el.getAttribute('data-status') : null;
}"""

JS_PROMPTS = """() => Array.from(document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt')).map(e => e.textContent.trim())"""

# The visible <img> inside the panel's selected tab: its natural (decoded) and drawn sizes.
JS_VISIBLE_IMG = """(tab) => {
  const imgs = Array.from(tab.querySelectorAll('.widget-tab-contents img'))
    .filter(i => i.offsetParent !== null);
  return imgs.map(i => ({complete: i.complete, nw: i.naturalWidth, nh: i.naturalHeight,
                         w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height}));
}"""


def _wait_for(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _dismiss_dialogs_and_toasts(page) -> list:
    """Accept a "Select Kernel" dialog; fail on the news toast ("Would you like to get notified about
    official Jupyter news?"), which the lab's settings turn off. Returns what was handled."""
    handled = []
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and dialog.first.is_visible():
        text = dialog.first.inner_text(timeout=STEP_S * 1000)
        if text.lstrip().startswith("Select Kernel"):
            dialog.first.locator("button.jp-mod-accept").click(timeout=STEP_S * 1000)
            handled.append("select-kernel dialog")
        else:
            raise AssertionError(f"unexpected dialog: {text!r}")
    toast = page.locator(".Toastify__toast", has_text="Jupyter news")
    if toast.count():
        raise AssertionError(f"JupyterLab asked about Jupyter news ({toast.first.inner_text()!r}): "
                             f"the settings of {LAB_CONFIG.parent / 'settings' / 'overrides.json'} did not apply")
    return handled


def _run_all_cells(page) -> None:
    """Run > Run All Cells, from the menu bar, as a learner would."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click(timeout=STEP_S * 1000)
    page.locator(".lm-Menu-item:not(.lm-mod-disabled)",
                 has_text=re.compile(r"^Run All Cells")).first.click(timeout=STEP_S * 1000)


def shoot(locator, name: str) -> None:
    """A screenshot of ``locator`` into ARTIFACTS, with the mouse parked away from it (no hover
    highlight on table rows)."""
    locator.page.mouse.move(0, 0)
    locator.screenshot(path=str(ARTIFACTS / name))


def _panel_tab(panel, name: str):
    return panel.locator(":scope > .widget-tab-bar .lm-TabBar-tab", has_text=re.compile(f"^{name}$"))


def _visible_page_text(panel) -> str:
    return panel.evaluate("""(tab) => Array.from(tab.querySelectorAll('.widget-tab-contents > *'))
        .filter(e => e.offsetParent !== null && !e.classList.contains('lm-mod-hidden'))
        .map(e => e.innerText).join('\\n')""")


# ----------------------------------------------------------------------------- the test

@pytest.mark.browser
@pytest.mark.timeout(150)
def test_panel_renders_in_jupyterlab_chromium(tmp_path):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Chromium not found (/usr/bin/chromium or `chromium` on PATH): "
                    "`apt-get install chromium` (make test does it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"the playwright Python package is not installed ({exc}): pip install playwright")

    t_start = time.monotonic()
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    print(f"\nbrowser test artifacts: {ARTIFACTS}")

    console_errors: list = []        # (type, text, location)
    page_errors: list = []
    handled: list = []
    lab = Lab(root, tmp_path / "jupyter-home")
    browser = page = None
    pw = None
    try:
        lab.start()
        t_server = time.monotonic()
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
                                     timeout=30_000)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(STEP_S * 1000)
        page.on("console", lambda m: console_errors.append((m.type, m.text, m.location))
                if m.type == "error" else None)
        page.on("pageerror", lambda e: page_errors.append(f"{e.name}: {e.message}\n{e.stack}"))

        page.goto(f"{lab.url}/lab/tree/{NOTEBOOK.name}", wait_until="domcontentloaded",
                  timeout=PAGE_LOAD_S * 1000)
        page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="visible", timeout=PAGE_LOAD_S * 1000)

        # The kernel: accept "Select Kernel" if asked, and wait until it is idle.
        # The page's own indicator says "idle" before a kernel is even connected, so ask the
        # server too, and the status bar ("Python 3 (ipykernel) | Idle").
        def kernel_idle():
            handled.extend(_dismiss_dialogs_and_toasts(page))
            return (lab.kernel_state(NOTEBOOK.name) == "idle" and page.evaluate(JS_KERNEL_STATUS) == "idle"
                    and re.search(r"\| Idle\b", page.locator("#jp-main-statusbar").inner_text()) is not None)
        _wait_for(kernel_idle, KERNEL_READY_S, "the kernel to be idle", interval=0.5)
        t_kernel = time.monotonic()

        _run_all_cells(page)

        panel = page.locator(".jp-OutputArea-output .widget-tab").first

        def all_done():
            handled.extend(_dismiss_dialogs_and_toasts(page))
            prompts = page.evaluate(JS_PROMPTS)
            finished = page.locator(".jp-OutputArea-output .widget-html", has_text="finished:").count() > 0
            done = prompts and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts)
            return done and finished and page.evaluate(JS_KERNEL_STATUS) == "idle" and prompts
        prompts = _wait_for(all_done, RUN_ALL_S, "all cells to run and the panel to finish", interval=0.5)
        t_run = time.monotonic()
        page.screenshot(path=str(ARTIFACTS / "lab_after_run_all.png"))

        # No cell failed and every widget rendered.
        errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')
        assert errors.count() == 0, f"a cell failed:\n{errors.first.inner_text()}"
        body = page.locator(".jp-NotebookPanel").first.inner_text()
        assert "Error displaying widget" not in body and "Loading widget" not in body, body[-2000:]
        assert len(prompts) == 3, prompts
        assert "step 5: loss" in body, "the training cell printed no loss for step 5"

        # The five tabs, in order.
        titles = [t.strip() for t in panel.locator(":scope > .widget-tab-bar .lm-TabBar-tabLabel").all_inner_texts()]
        assert titles == TABS, titles
        status = page.locator(".jp-OutputArea-output .widget-html", has_text="finished:").first.inner_text()
        assert re.search(r"finished: \d+ events", status), status

        # The Timeline tab is selected while the cell runs; its figure is a decoded, drawn PNG.
        _panel_tab(panel, "Timeline").click()
        selected = panel.locator(":scope > .widget-tab-bar .lm-TabBar-tab.lm-mod-current").inner_text().strip()
        assert selected == "Timeline", selected
        imgs = _wait_for(lambda: [i for i in panel.evaluate(JS_VISIBLE_IMG) if i["complete"] and i["nw"] > 0],
                         STEP_S, "the timeline image to be decoded")
        img = imgs[0]
        assert img["nw"] > 200 and img["nh"] > 100, img
        assert img["w"] > 200 and img["h"] > 100, f"the timeline image is not drawn at a visible size: {img}"
        panel.scroll_into_view_if_needed()
        shoot(panel, "panel_timeline.png")

        # Click through the other tabs: each shows its content (redrawn on selection if needed).
        _panel_tab(panel, "Recompiles").click()
        text = _wait_for(lambda: (t := _visible_page_text(panel)) and "shape changed" in t and t,
                         STEP_S, "the Recompiles tab to show the shape change")
        assert "(8, 16) -> (5, 16)" in text, text
        shoot(panel, "panel_recompiles.png")

        _panel_tab(panel, "Advice").click()
        text = _wait_for(lambda: (t := _visible_page_text(panel)) and "seed" in t and t,
                         STEP_S, "the Advice tab to give advice")
        assert ".item()" in text and "recompiled" in text, text
        shoot(panel, "panel_advice.png")

        _panel_tab(panel, "Metrics").click()
        _wait_for(lambda: "Waiting for events" not in _visible_page_text(panel) and _visible_page_text(panel),
                  STEP_S, "the Metrics tab")
        shoot(panel, "panel_metrics.png")

        _panel_tab(panel, "Graph").click()
        imgs = _wait_for(lambda: [i for i in panel.evaluate(JS_VISIBLE_IMG) if i["complete"] and i["nw"] > 0],
                         STEP_S, "the graph image to be decoded")
        assert imgs[0]["w"] > 100 and imgs[0]["h"] > 100, imgs
        shoot(panel, "panel_graph.png")
        page.screenshot(path=str(ARTIFACTS / "lab_final.png"), full_page=True)
        handled.extend(_dismiss_dialogs_and_toasts(page))      # still no news toast, ~30 s after load

        # No JavaScript errors, on the console or uncaught.
        page.wait_for_timeout(500)      # let late errors of the last clicks arrive
        unexplained = [e for e in console_errors
                       if not any(re.fullmatch(p, e[1], re.S) for p, _why in BENIGN_CONSOLE_ERRORS)]
        assert not page_errors, "uncaught JavaScript errors:\n" + "\n\n".join(page_errors)
        assert not unexplained, "JavaScript console errors:\n" + "\n".join(
            f"{t}: {text} ({loc.get('url')}:{loc.get('lineNumber')})" for t, text, loc in unexplained)
        t_end = time.monotonic()
        print(f"browser test: server {t_server - t_start:.1f} s, page+kernel {t_kernel - t_server:.1f} s, "
              f"run all {t_run - t_kernel:.1f} s, checks {t_end - t_run:.1f} s, total {t_end - t_start:.1f} s; "
              f"handled: {sorted(set(handled)) or 'nothing'}; console errors ignored: "
              f"{len(console_errors) - len(unexplained)}")
    except BaseException:
        if page is not None:
            try:
                page.screenshot(path=str(ARTIFACTS / "failure.png"), timeout=10_000)
                print(f"failure screenshot: {ARTIFACTS / 'failure.png'}")
            except Exception as exc:       # the page may be gone
                print(f"(no failure screenshot: {exc})")
        print("console errors:", json.dumps([e[:2] for e in console_errors], indent=1))
        print("page errors:", page_errors)
        print("---- jupyter log (tail) ----\n" + lab.log_tail())
        raise
    finally:
        try:
            if browser is not None:
                browser.close()
        finally:
            try:
                if pw is not None:
                    pw.stop()
            finally:
                lab.stop()
