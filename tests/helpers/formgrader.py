"""formgrader served as an instructor runs it: Jupyter Server with nbgrader's formgrader extension on a
course directory, on loopback, with nothing read from or written to the user's own Jupyter folders.

With a `token`, the server asks for it as a real one does: `login(driver, url, token)` logs a browser in as
the instructor (the server sets its cookie), and `api(url, path, token)` reads formgrader's API the same way.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STARTUP = 300  # seconds for Jupyter Server to import its extensions on a busy machine


@contextlib.contextmanager
def serve(course: Path, folder: Path, token: str = "", home: Path | None = None):
    """Yields the server's base URL; `folder` holds its config (`folder/config`, where a test may have put an
    nbgrader_config.py), runtime files and server.log. With `home`, the server starts there, as a hub starts
    a user's server in their home folder, the course inside it; else in the course."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (folder / "config").mkdir(exist_ok=True)
    (folder / "config" / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": True}}}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(folder / "config"), "JUPYTER_RUNTIME_DIR": str(folder / "run"),
           "JUPYTER_DATA_DIR": str(folder / "data")}
    args = [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}", "--ServerApp.password=", f"--ServerApp.root_dir={home or course}",
            *(["--allow-root"] if os.geteuid() == 0 else [])]
    log = open(folder / "server.log", "w")
    process = subprocess.Popen(args, cwd=home or course, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            try:
                api(url, "/formgrader/api/assignments", token)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, (folder / "server.log").read_text()
                time.sleep(1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def api(url: str, path: str, token: str = ""):
    """formgrader's API answer at `path`, as JSON."""
    request = urllib.request.Request(url + path, headers={"Authorization": f"token {token}"} if token else {})
    return json.loads(urllib.request.urlopen(request, timeout=60).read())


def login(driver, url: str, token: str) -> None:
    """The browser logged in as the instructor: the server trades the token in the URL for its login cookie."""
    driver.get(f"{url}/tree?token={token}")
    assert any(c["name"].startswith("username-") for c in driver.get_cookies()), "the server set no login cookie"


def submissions(url: str, assignment: str, notebook: str, token: str = "") -> dict[str, str]:
    """formgrader's submission id -> student, from its own API."""
    rows = api(url, f"/formgrader/api/submitted_notebooks/{assignment}/{notebook}", token)
    return {row["id"]: row["student"] for row in rows}
