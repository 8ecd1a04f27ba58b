"""Student HTML never runs where staff or students look, proven in a real Chromium.

Every payload of tests/corpus/xss.yml (markdown, raw cells, outputs, attachments, cell and notebook metadata,
file names) goes into one submission, which then takes every road to a screen: nbgrader's autograde and the
`--gradebook` route, formgrader's view of each (Jupyter Server on loopback, the browser logged in as the
instructor with a real token), nbgrader's generate_feedback, the `--html` pages and the class report. On each
page: no payload set its global or the title, no request reached the loopback listener the payloads call, the
browser's network log shows no request to anywhere but the page's own server (beyond what an honest
submission's page makes), no element carries a script, frame, event handler or javascript:/data: link, and
the honest content (the notebook's prose, a table, code, the feedback page) is still there.

A control proves the corpus live: the same notebook rendered by nbconvert as it is (sanitize_html off, as
formgrader renders) runs or fetches every payload the corpus marks `fires`.
"""
from __future__ import annotations

import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import pytest
import yaml
from click.testing import CliRunner

from grader.cli import main
from grader.lms.student_html import neutralise
from helpers.formgrader import api, login, serve, submissions
from helpers.paths import COURSE, ROOT, STUB

pytestmark = pytest.mark.slow

ASSIGNMENT, NOTEBOOK = COURSE.assignment, Path(COURSE.notebook).stem
CORPUS = yaml.safe_load((Path(__file__).parent / "corpus" / "xss.yml").read_text(encoding="utf-8"))
TOKEN = "xss-instructor-token-0123456789abcdef"
HONEST = ["Becoming a backprop ninja", "HONEST-PROSE bold words", "HONEST-TABLE-CELL", "honest_code_line",
          "honest stream output"]
# Elements that run, frame, fetch or send: none may come from a student.
ACTIVE = "script, iframe, frame, object, embed, form, svg, math, link, meta, base, style, video, audio, source, input"

_DOM = """
const root = document.querySelector(arguments[0]) || document.body;
const own = document.querySelector('#bpn-feedback');
const found = [];
for (const el of root.querySelectorAll('*')) {
    if (own && (own === el || own.contains(el))) continue;   // the grader's own page: its <style> and PNGs
    if (el.matches(arguments[1])) found.push('<' + el.tagName.toLowerCase() + '>');
    for (const a of el.attributes) {
        const v = a.value.trim().toLowerCase();
        if (a.name.startsWith('on')) found.push(el.tagName.toLowerCase() + ' ' + a.name);
        if (['href', 'src', 'action', 'formaction', 'data', 'xlink:href', 'srcdoc', 'style'].includes(a.name)
            && (v.startsWith('javascript:') || v.startsWith('data:') || v.includes('url(') || a.name === 'srcdoc'))
            found.push(el.tagName.toLowerCase() + ' ' + a.name + '=' + v.slice(0, 40));
    }
}
return {found: found, xss: window.__xss || null, title: document.title, text: document.body.innerText};
"""


class Beacon:
    """A loopback listener that payloads call: every request it gets is a payload that ran or fetched."""

    def __init__(self):
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _js(beacon: Beacon, name: str) -> str:
    return (f"window.__xss=(window.__xss||[]).concat(['{name}']);document.title='XSS-{name}';"
            f"new(Image)().src='{beacon.url}/js/{name}'")


def payload(entry: dict, beacon: Beacon) -> str:
    js = _js(beacon, entry["id"])
    return (entry["payload"].replace("{js64}", base64.b64encode(js.encode()).decode())
            .replace("{html64}", base64.b64encode(f"<script>{js}</script>".encode()).decode())
            .replace("{js}", js).replace("{url}", f"{beacon.url}/fetch/{entry['id']}"))


def plant(nb, beacon: Beacon) -> None:
    """Every payload but the file names into `nb`, with honest content beside them."""
    new = nbformat.v4
    nb.cells.append(new.new_markdown_cell("**HONEST-PROSE bold words** and a table:\n\n| a | b |\n|---|---|\n"
                                          "| HONEST-TABLE-CELL | 2 |\n\n```python\nhonest_code_line = 1 < 2\n```\n"))
    honest = new.new_code_cell("print('honest stream output')",
                               outputs=[new.new_output("stream", name="stdout", text="honest stream output\n")])
    nb.cells.append(honest)
    for entry in CORPUS:
        text, where = payload(entry, beacon), entry["where"]
        if where == "markdown":
            nb.cells.append(new.new_markdown_cell(text))
        elif where == "raw":
            nb.cells.append(new.new_raw_cell(text, metadata={"raw_mimetype": "text/html"}))
        elif where == "output":
            data = {entry["kind"]: text, "text/plain": "an output"}
            nb.cells.append(new.new_code_cell("display(thing)", outputs=[new.new_output("display_data", data=data)]))
        elif where == "attachment":
            cell = new.new_markdown_cell(f"![attached]({'attachment:'}{entry['id']}.bin)")
            cell["attachments"] = {f"{entry['id']}.bin": {entry["kind"]: base64.b64encode(text.encode()).decode()}}
            nb.cells.append(cell)
        elif where == "tags":
            nb.cells.append(new.new_markdown_cell("tagged", metadata={"tags": [text]}))
        elif where == "cell_id":
            cell = new.new_markdown_cell("a cell with a strange id")
            cell["id"] = text
            nb.cells.append(cell)
        elif where == "title":
            nb.metadata["title"] = text
        elif where == "widgets":
            nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
                "version_major": 2, "version_minor": 0, "state": {"x": {"model_name": text}}}}
    nb.cells.append(new.new_markdown_cell("", metadata={"transient": {"remove_source": True}}))


def write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")  # as a hostile client writes it: no validation


FILENAME = next(e for e in CORPUS if e["where"] == "filename")["payload"]


@pytest.fixture(scope="module")
def beacon():
    b = Beacon()
    yield b
    b.close()


def look(driver, url: str, beacon: Beacon, within: str = "body", allowed: tuple[str, ...] = ()) -> dict:
    """Load `url` and report what happened: the DOM's active parts, globals, title, requests, text."""
    beacon.hits.clear()
    driver.get_log("performance")
    driver.get(url)
    time.sleep(3)  # a payload's onerror, a meta refresh after 1 s, a lazy fetch
    state = driver.execute_script(_DOM, within, ACTIVE)
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested = message["params"]["request"]["url"]
            if not requested.startswith(("data:", "about:", "blob:", *allowed)):
                requests.append(requested[:120])
    return {**state, "requests": sorted(set(requests)), "hits": list(beacon.hits), "url": driver.current_url}


def assert_inert(seen: dict, where: str, start_url: str, baseline: dict | None = None) -> None:
    """`baseline`: what the same view of an honest submission shows (formgrader's own score inputs and styles,
    the template's own scripts from a CDN), which is not the student's."""
    baseline = baseline or {"requests": [], "found": []}
    problems = []
    if seen["hits"]:
        problems.append(f"the listener was called: {seen['hits']}")
    if seen["xss"]:
        problems.append(f"payloads ran: {seen['xss']}")
    if "XSS" in seen["title"]:
        problems.append(f"the title changed: {seen['title']}")
    if seen["url"].split("#")[0] != start_url.split("#")[0]:
        problems.append(f"the page went to {seen['url']}")
    extra = [r for r in seen["requests"] if r not in baseline["requests"]]
    if extra:
        problems.append(f"requests: {extra}")
    found = sorted(set(seen["found"]) - set(baseline["found"]))
    if found:
        problems.append(f"active elements or attributes: {found[:20]}")
    assert not problems, f"{where}:\n  " + "\n  ".join(problems)


def assert_honest(seen: dict, where: str, texts=HONEST) -> None:
    missing = [t for t in texts if t not in seen["text"]]
    assert not missing, f"{where}: the honest content is gone: {missing}"


# ---------------------------------------------------------------------------------------------
# Any renderer: the neutralised notebook through nbconvert as it is, against the notebook untouched


@pytest.fixture(scope="module")
def planted(beacon):
    nb = nbformat.read(STUB, as_version=4)
    plant(nb, beacon)
    return nb


def _render(nb, template: str, path: Path) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name=template).from_notebook_node(nbformat.from_dict(json.loads(json.dumps(nb))))
    path.write_text(body, encoding="utf-8")
    return path.as_uri()


def test_the_corpus_is_live_in_a_notebook_rendered_as_it_is(planted, beacon, loopback_browser, tmp_path):
    """Without neutralising, nbconvert's HTML runs or fetches each payload marked `fires`: the checks can fail.
    (A cell id nbformat does not allow makes nbconvert refuse the whole notebook: one id here is replaced.)"""
    nb = nbformat.from_dict(json.loads(json.dumps(planted)))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    url = _render(nb, "classic", tmp_path / "raw.html")
    seen = look(loopback_browser, url, beacon, allowed=("file:",))
    fired = set(seen["xss"] or []) | {hit.split("/")[2] for hit in seen["hits"]}
    expected = {e["id"] for e in CORPUS if e.get("fires")}
    assert expected <= fired, f"payloads marked fires that did not: {sorted(expected - fired)}"


@pytest.mark.parametrize("template", ["classic", "lab"])
def test_a_neutralised_notebook_is_inert_in_any_nbconvert_template(planted, beacon, loopback_browser, tmp_path,
                                                                    template):
    """What the template itself loads (its scripts from a CDN) is measured on the honest notebook."""
    honest = _render(nbformat.read(STUB, as_version=4), template, tmp_path / f"{template}-honest.html")
    baseline = look(loopback_browser, honest, beacon, allowed=("file:",))
    nb = nbformat.from_dict(json.loads(json.dumps(planted)))
    neutralise(nb)
    url = _render(nb, template, tmp_path / f"{template}.html")
    seen = look(loopback_browser, url, beacon, allowed=("file:",))
    assert_inert(seen, f"nbconvert's {template} template", url, baseline)
    assert_honest(seen, template)


# ---------------------------------------------------------------------------------------------
# The real course: nbgrader autograde, the --gradebook route, formgrader, feedback, --html, the report


@pytest.fixture(scope="module")
def course(tmp_path_factory, beacon):
    out = tmp_path_factory.mktemp("xss")
    done = CliRunner().invoke(main, ["demo", "--course", str(ROOT / "course.yml"), "--out", str(out)])
    assert done.exit_code == 0, done.output
    root = out / "course"
    nb = nbformat.read(root / "submitted" / "ada" / ASSIGNMENT / COURSE.notebook, as_version=4)
    plant(nb, beacon)
    # Both routes read a notebook as nbformat validates it: one whose cell id nbformat does not allow is not
    # graded at all, so here the corpus goes in without that payload (the renderer tests above have it).
    for cell in nb.cells:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", cell.get("id", "x")):
            cell["id"] = "replaced-id"
    for student in ("mallory", "trudy", FILENAME):
        write(nb, root / "submitted" / student / ASSIGNMENT / COURSE.notebook)
    env = {"JUPYTER_CONFIG_DIR": str(out / "jupyter" / "config"), "JUPYTER_DATA_DIR": str(out / "jupyter" / "data")}
    ran = {}

    def run(*args):
        done = subprocess.run(list(args), cwd=root, env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=600)
        ran[args] = done
        return done

    for student in ("mallory", FILENAME):
        graded = run(shutil.which("nbgrader"), "autograde", ASSIGNMENT, f"--student={student}")
        assert (graded.returncode == 0) is (student == "mallory"), graded.stderr[-3000:]
    for student in ("trudy", FILENAME):
        fast = run(shutil.which("backprop-ninja"), "grade", "--gradebook", "gradebook.db", "--out", str(out / "fast"),
                   "--html", "-j", "1", str(root / "submitted" / student))
        assert (fast.returncode == 0) is (student == "trudy"), fast.stderr
    named = out / "plain" / f"{FILENAME}.ipynb"
    write(nb, named)
    plain = run(shutil.which("backprop-ninja"), "grade", "--out", str(out / "plain-results"), "--html", "-j", "1",
                str(named.parent))
    assert plain.returncode == 0, plain.stderr
    report = run(shutil.which("backprop-ninja"), "report", str(out / "plain-results"))
    assert report.returncode == 0, report.stderr
    feedback = run(shutil.which("nbgrader"), "generate_feedback", ASSIGNMENT, "--force")
    assert feedback.returncode == 0, feedback.stderr
    return {"root": root, "out": out, "fast": fast, "ran": ran}


@pytest.fixture(scope="module")
def server(course, tmp_path_factory):
    with serve(course["root"], tmp_path_factory.mktemp("jupyter"), token=TOKEN) as url:
        yield url


def test_a_student_named_with_markup_is_never_recorded(course, server):
    """The file-name payload: neither route records the student, so no page of formgrader names them."""
    assert "the student id" in course["fast"].stderr and "formgrader" in course["fast"].stderr
    students = {s["id"] for s in api(server, "/formgrader/api/students", TOKEN)}
    assert "mallory" in students and "trudy" in students
    assert FILENAME not in set(submissions(server, ASSIGNMENT, NOTEBOOK, TOKEN).values())
    # nbgrader leaves what its sanitize steps wrote when grading fails: neutralised already
    for left in (course["root"] / "autograded" / FILENAME).rglob("*.ipynb"):
        assert "onerror" not in left.read_text(encoding="utf-8") and "<script" not in left.read_text(encoding="utf-8")


@pytest.mark.parametrize("student", ["mallory", "trudy"])
def test_formgrader_shows_a_hostile_submission_inert_to_the_logged_in_instructor(course, server, loopback_browser,
                                                                                 beacon, student):
    login(loopback_browser, server, TOKEN)
    ids = {s: i for i, s in submissions(server, ASSIGNMENT, NOTEBOOK, TOKEN).items()}
    honest_url = f"{server}/formgrader/submissions/{ids['ada']}/"
    baseline = look(loopback_browser, honest_url, beacon, "#notebook-container", allowed=(server,))
    url = f"{server}/formgrader/submissions/{ids[student]}/"
    seen = look(loopback_browser, url, beacon, "#notebook-container", allowed=(server,))
    assert_inert(seen, f"formgrader, {student}'s submission", url, baseline)
    assert_honest(seen, f"formgrader, {student}", [*HONEST[:4], "Feedback for", "Total:"])
    # formgrader's own pages around it, built by its scripts (their elements are its own): nothing ran or left
    for page in (f"/formgrader/gradebook/{ASSIGNMENT}/{NOTEBOOK}", "/formgrader/manage_students"):
        seen = look(loopback_browser, server + page, beacon, allowed=(server,))
        assert_inert(seen, page, server + page, {"requests": baseline["requests"], "found": seen["found"]})


def test_feedback_html_and_reports_are_inert(course, loopback_browser, beacon):
    root, out = course["root"], course["out"]
    pages = [root / "feedback" / s / ASSIGNMENT / f"{NOTEBOOK}.html" for s in ("mallory", "trudy")]
    pages += sorted((out / "fast").rglob("*.html")) + sorted(p for p in (out / "plain-results").rglob("*.html")
                                                             if p.name != "report.html")
    assert len(pages) >= 4, pages
    honest = look(loopback_browser, (root / "feedback" / "ada" / ASSIGNMENT / f"{NOTEBOOK}.html").as_uri(), beacon,
                  "#notebook-container", allowed=("file:",))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert 'http-equiv="Content-Security-Policy"' in text, page
        # nbgrader's feedback: the notebook's container, against an honest student's (the grader's page styles)
        seen = look(loopback_browser, page.as_uri(), beacon, "#notebook-container", allowed=("file:",))
        assert_inert(seen, str(page.relative_to(out)), page.as_uri(), honest)
        if page.parent.name == ASSIGNMENT and page.parent.parent.parent.name == "feedback":
            assert_honest(seen, str(page), [*HONEST[:4], "Feedback for"])
    # The class report names the file-name payload, escaped; its own chart is a PNG it drew (a data: image
    # the project writes, never a student's): everything else must be as inert as above.
    report = out / "plain-results" / "report.html"
    assert "&lt;img src=x onerror=" in report.read_text(encoding="utf-8")
    seen = look(loopback_browser, report.as_uri(), beacon, allowed=("file:",))
    chart = [f for f in seen["found"] if f.startswith("img src=data:image/png;base64,")]
    assert_inert(seen, "report.html", report.as_uri(), {"requests": honest["requests"], "found": chart})
