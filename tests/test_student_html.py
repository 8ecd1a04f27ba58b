"""What a submitted notebook keeps once neutralised (grader.lms.student_html), without a browser: every payload
of tests/corpus/xss.yml loses what could run or fetch, the assignment's own prose renders to the same text,
and names with markup are refused where nbgrader would take them. tests/test_xss.py proves the same in
Chromium, through nbgrader and formgrader."""
from __future__ import annotations

import copy
import html
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from nbgrader.apps import ZipCollectApp
from nbgrader.coursedir import CourseDirectory

from grader import safe_text
from grader.lms.nbgrader import LmsCollector
from grader.lms.student_html import clean, markdown, neutralise, unsafe_name
from helpers.paths import STUB

CORPUS = yaml.safe_load((Path(__file__).parent / "corpus" / "xss.yml").read_text(encoding="utf-8"))
TEMPLATE = Path(__file__).resolve().parents[1] / "grader" / "lms" / "nbgrader_templates" / "backprop_ninja_feedback"
# What may not survive in any attribute or tag a student wrote.
LIVE = re.compile(r"<\s*(script|iframe|object|embed|svg|math|style|link|meta|base|form|input|video|source)\b"
                  r"|\son\w+\s*=|javascript:|data:|src\s*=|url\(|http://127", re.I)


def _filled(entry) -> str:
    return (entry["payload"].replace("{js64}", "YWxlcnQoMSk=").replace("{html64}", "PHNjcmlwdD4=")
            .replace("{js}", "alert(1)").replace("{url}", "http://127.0.0.1:9/fetch"))


def _text(page: str) -> str:
    page = re.sub(r"(?is)<(script|style)\b.*?</\1>", "", page)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).replace("¶", "").split())


@pytest.mark.parametrize("entry", [e for e in CORPUS if e["where"] in ("markdown", "raw")], ids=lambda e: e["id"])
def test_markdown_and_raw_payloads_keep_nothing_that_runs_or_fetches(entry):
    text = _filled(entry)
    cleaned = markdown(text) if entry["where"] == "markdown" else clean(text)
    assert not LIVE.search(cleaned), cleaned


def test_a_neutralised_markdown_cell_renders_again_unchanged_and_keeps_its_structure():
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    source = ("# Title\n\nSome *prose* with $a<b$ and `x<y`.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
              "```python\nx = 1\n\ny = 2\n```")
    once = markdown(source)
    assert "\n" not in once and markdown2html_mistune(once).strip() == once
    for kept in ("<h1>Title", "<em>prose</em>", "$a&lt;b$", "<code>x&lt;y</code>", "<table>", "<td>1</td>",
                 '<div class="highlight"><pre>', "&#10;&#10;"):
        assert kept in once, kept


def test_a_cell_the_renderer_fails_on_is_shown_as_escaped_text_and_the_others_as_prose():
    """A fence followed by `&#10;` makes nbconvert's markdown renderer raise (IndexError); neutralising the
    notebook cost the student the whole grade. That cell becomes the text typed, escaped; the others render."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("```&#10;\n<script>alert(1)</script>"),
                                         nbformat.v4.new_markdown_cell("*prose*")])
    neutralise(nb)
    assert nb.cells[0].source == "<div><pre>```&amp;#10;&#10;&lt;script&gt;alert(1)&lt;/script&gt;</pre></div>"
    assert markdown2html_mistune(nb.cells[0].source).strip() == nb.cells[0].source
    assert nb.cells[1].source == "<div><p><em>prose</em></p></div>"


def test_outputs_attachments_and_metadata_lose_what_a_template_would_write_out():
    nb = nbformat.v4.new_notebook(metadata={"title": "<script>", "widgets": {"x": 1},
                                            "kernelspec": {"name": "python3", "display_name": "Python 3"}})
    cell = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={
        "text/html": "<b onclick=x>bold</b><script>1</script>", "application/javascript": "alert(1)",
        "image/svg+xml": "<svg onload=x>", "image/png": 'x" onerror="alert(1)', "image/jpeg": "/9j/4AAQ",
        "text/markdown": "*md* <img src=x onerror=y>", "text/plain": "plain"},
        metadata={"image/png": {"width": "1 onload=x"}})],
        metadata={"tags": ['"><b>', "fine-tag"], "transient": {"remove_source": True}, "nbgrader": {"grade": False}})
    cell.execution_count = "<script>"
    md = nbformat.v4.new_markdown_cell("![x](attachment:a.png)", metadata={"jupyter": {"source_hidden": True}})
    md["attachments"] = {"a.png": {"image/svg+xml": "PHN2Zz4="}}
    md["id"] = '"><script>'
    raw = nbformat.v4.new_raw_cell("<img src=x onerror=y>ok", metadata={"raw_mimetype": "text/html"})
    nb.cells = [cell, md, raw]
    neutralise(nb)
    assert nb.metadata == {"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    (output,) = cell.outputs
    assert output.data == {"text/html": "<b>bold</b>", "image/jpeg": "/9j/4AAQ", "text/plain": "plain"}
    assert output.metadata == {} and cell.execution_count is None
    assert cell.metadata == {"tags": ["fine-tag"], "nbgrader": {"grade": False}}
    assert "attachments" not in md and md.metadata == {} and re.fullmatch(r"[A-Za-z0-9_-]+", md.id)
    assert md.source == '<div><p><img alt="x"></p></div>'
    assert raw.source == "<img>ok" and raw.metadata == {"raw_mimetype": "text/html"}


def test_notebook_metadata_reaches_nbconvert_only_through_the_allowlist(tmp_path, monkeypatch):
    """language_info as a student can write it: `jupyter nbconvert --to script` on the autograded notebook
    imported the module its nbconvert_exporter names (with the TA's rights), and templates print its name and
    lexer raw. Once neutralised, only a Python kernel's own values are left, and nbconvert imports nothing."""
    from nbconvert.exporters import ScriptExporter

    proof = tmp_path / "ran"
    (tmp_path / "evil_exporter.py").write_text(
        f"open({str(proof)!r}, 'w').close()\nfrom nbconvert.exporters import PythonExporter as Exporter\n")
    python = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python", "file_extension": ".py",
              "nbconvert_exporter": "python", "pygments_lexer": "ipython3",
              "codemirror_mode": {"name": "ipython", "version": 3}}
    evil = {**python, "name": "<script>alert(1)</script>", "pygments_lexer": "x` onerror=alert(1)",
            "nbconvert_exporter": "evil_exporter.Exporter", "version": "3<b>", "file_extension": ".py;rm"}
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    for given, kept in ((python, python), (evil, {"name": "python", "mimetype": "text/x-python",
                                                                   "codemirror_mode": python["codemirror_mode"]})):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")], metadata={
            "language_info": dict(given), "kernelspec": {**kernelspec, "display_name": "<img src=x onerror=y>"}})
        neutralise(nb)
        assert nb.metadata == {"language_info": kept, "kernelspec": {**kernelspec, "display_name": "Python 3"}}
    monkeypatch.syspath_prepend(str(tmp_path))
    script, _ = ScriptExporter().from_notebook_node(nb)
    assert not proof.exists() and "x = 1" in script
    nb.metadata.language_info = evil
    ScriptExporter().from_notebook_node(nb)
    assert proof.exists(), "the attack this test stands for"


def test_neutralising_twice_changes_nothing():
    """nbgrader's route neutralises in its sanitize steps and again after grading; the fast route once."""
    nb = nbformat.read(STUB, as_version=4)
    nb.cells += [nbformat.v4.new_markdown_cell(_filled(e)) for e in CORPUS if e["where"] == "markdown"]
    neutralise(nb)
    once = copy.deepcopy(nb)
    neutralise(nb)
    assert nb == once


def test_a_notebook_of_megabytes_of_markdown_is_rendered_within_a_budget():
    """A red team's 5 MB of markdown headings held autograde for four minutes and left a 46 MB notebook: past a
    notebook's budget, a cell shows the start of its text as typed, and a second pass charges nothing."""
    import time

    from grader.lms.student_html import MARKDOWN_BUDGET, SHOWN_PAST_BUDGET

    nb = nbformat.read(STUB, as_version=4)
    own = [c.source for c in nb.cells if c.cell_type == "markdown"]
    heading = "# a\n" * 25_000
    nb.cells += [nbformat.v4.new_markdown_cell(heading) for _ in range(50)]
    nb.cells.append(nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/markdown": heading})]))
    start = time.process_time()
    neutralise(nb)
    assert time.process_time() - start < 30  # some 36 us a character without the budget: 180 s
    rendered = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert not any("past the" in s for s in rendered[:len(own)])  # the notebook's own text, rendered
    past = [s for s in rendered if "characters of markdown, past the" in s]
    assert len(past) >= 50 - MARKDOWN_BUDGET // len(heading)
    assert all(len(s) < 2 * SHOWN_PAST_BUDGET + 500 for s in past)
    assert "characters of markdown, past the" in nb.cells[-1].outputs[0].data["text/html"]
    once = copy.deepcopy(nb)
    neutralise(nb)
    assert nb == once


def test_the_assignments_own_notebook_reads_the_same_once_neutralised():
    from nbconvert import HTMLExporter

    nb = nbformat.read(STUB, as_version=4)
    before = _text(HTMLExporter(template_name="classic").from_notebook_node(copy.deepcopy(nb))[0])
    neutralise(nb)
    assert _text(HTMLExporter(template_name="classic").from_notebook_node(nb)[0]) == before


@pytest.mark.parametrize("name, unsafe", [("ada", False), ("a.lovelace@uni.example", False), ("Ada Lovelace", False),
                                          ("<img src=x onerror=alert(1)>", True), ('a"b', True), ("a&b", True),
                                          ("x\x1b[2J", True)])
def test_names_holding_markup_are_refused(name, unsafe):
    assert bool(unsafe_name(name)) is unsafe


def test_zip_collect_skips_a_download_whose_name_holds_markup(tmp_path):
    app = ZipCollectApp()  # the collector files into the course zip_collect runs in
    app.coursedir = CourseDirectory(parent=app, root=str(tmp_path), assignment_id="backprop_ninja")
    collector = LmsCollector(parent=app)
    extracted = Path(app._format_collect_path(app.extracted_directory))
    extracted.mkdir(parents=True)
    for name in ("eve_backprop_ninja.ipynb", "<svg onload=alert(1)>_backprop_ninja.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(), extracted / name)
    assert collector.collect(str(extracted / "eve_backprop_ninja.ipynb"))["student_id"] == "eve"
    assert collector.collect(str(extracted / "<svg onload=alert(1)>_backprop_ninja.ipynb")) is None


def test_every_page_the_project_writes_carries_the_policy():
    policy = re.search(r'content=\\"([^\\]*)\\"', (TEMPLATE / "index.html.j2").read_text(encoding="utf-8")).group(1)
    assert policy == safe_text.PAGE_POLICY
    assert "script-src" not in policy and "default-src 'none'" in policy
