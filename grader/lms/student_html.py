"""A submitted notebook made safe to render on staff's and students' screens.

Whatever a student's notebook holds reaches HTML: nbgrader stores the autograded notebook, formgrader renders
it on the Jupyter server's origin where the TA is logged in (its markdown through nbconvert's markdown2html with
no sanitizing at all, even where the exporter's `sanitize_html` is on), and generate_feedback renders it for the
student. A `<script>` or an `onerror` in a markdown cell would run with the TA's login: read course.yml through
/api/contents, change grades, open a terminal. So the notebook itself is neutralised before anything renders it
(the sanitize step of both nbgrader autograde and the `--gradebook` route), and every view of it is safe whatever
renders it and however that renderer is configured.

What a student wrote goes through nh3 (the maintained binding of Rust's ammonia, an allowlist HTML sanitizer):
- a markdown cell is rendered by nbconvert's own markdown renderer and cleaned, and its source becomes that HTML
  on one line inside a `<div>`, which markdown passes through unchanged (an HTML block ends only at a blank
  line), so formgrader and feedback show the same prose, tables, code and TeX, minus the dangerous parts;
- a raw cell's source is cleaned as HTML; an output's HTML (and markdown) is cleaned, every other rich type
  than plain text and base64 PNG/JPEG is dropped, and so is output metadata (templates write it into tags);
- attachments, cell metadata other than nbgrader's and tags, and notebook metadata other than the kernel's and
  language's are dropped (widget state loads scripts, `transient` hides a cell from the TA), the kernel's and
  language's keep only the values a Python kernel writes (nbconvert imports the exporter language_info names),
  and a cell id or execution count that is not what nbformat allows is replaced.

The allowlist keeps text structure (headings, lists, tables, code, emphasis, quotes) and nothing that runs or
fetches: no script, style, iframe, object, embed, form, svg or math markup, no event handler or style attribute,
no id or name (they would clobber formgrader's own elements), links only to http, https and mailto, and no
image source at all (a remote image is a request that tells the student who looked; an image keeps its alt
text). Classes are kept only where nbconvert's highlighter writes them, on code.
"""
from __future__ import annotations

import html
import re

import nh3

# Tags that structure text. Left out on purpose: img's src, area/map (links by coordinates), and everything
# nh3 never allows (script, style, iframe, object, embed, form, input, svg, math, link, meta, base).
TAGS = nh3.ALLOWED_TAGS - {"area", "map"}
ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"alt", "title", "width", "height"},
    "ol": {"start"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align", "scope"},
    "abbr": {"title"},
}
URL_SCHEMES = {"http", "https", "mailto"}
# Each output kind a student's output may keep; text/markdown is rendered and cleaned into text/html.
KEPT_OUTPUTS = {"text/plain", "text/html", "image/png", "image/jpeg"}
CELL_METADATA = {"nbgrader", "tags"}
# Notebook metadata, value by value as a Python kernel writes it: nbconvert --to script imports the module
# language_info's nbconvert_exporter names, and the markdown and rst templates print its name and lexer raw.
LANGUAGE_INFO = {"name": {"python"}, "nbconvert_exporter": {"python"}, "pygments_lexer": {"ipython3", "python"},
                 "file_extension": {".py"}, "mimetype": {"text/x-python"}}
CODEMIRROR_MODE = {"name": "ipython", "version": 3}
VERSION = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}")
KERNELSPEC = {"name", "display_name", "language"}
KERNELSPEC_TEXT = re.compile(r"[A-Za-z0-9 ._()-]{1,64}")
PYTHON_KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
# nbformat 4.5's cell id: what a template may write into an id attribute.
CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
TAG = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


# A student id or name nbgrader takes from a file or folder name the student chose (the exchange's inbound
# folder, an LMS download's file name) and formgrader writes into its submission page unescaped.
MARKUP = re.compile(r"[<>&\"'`\x00-\x1f\x7f]")


def unsafe_name(name: str) -> str | None:
    """Why `name` may not be a student id or name (it holds what HTML reads as markup), or None."""
    found = MARKUP.search(name)
    return None if found is None else (f"{name!r} holds {found.group()!r}, which formgrader's pages would read "
                                       "as HTML: rename it (letters, digits, '.', '-', '@')")


def _highlight_classes() -> dict[str, set[str]]:
    """The classes nbconvert's pygments highlighter gives code blocks: the only classes kept."""
    from pygments.token import STANDARD_TYPES

    return {"div": {"highlight"}, "span": {c for c in STANDARD_TYPES.values() if c}}


def clean(html: str) -> str:
    """`html` with only the allowlist's tags, attributes and URLs left."""
    return nh3.clean(html, tags=TAGS, attributes=ATTRIBUTES, url_schemes=URL_SCHEMES, url_relative="deny",
                     allowed_classes=_highlight_classes(), strip_comments=True)


def markdown(source: str) -> str:
    """A markdown cell's source as the cleaned HTML nbconvert would show, on one line inside a `<div>`: markdown
    renders it again unchanged, so every renderer shows what was cleaned here. A newline becomes `&#10;`, which
    HTML reads as the same newline (in `<pre>` too) and markdown does not see."""
    from mistune.renderers.html import HTMLRenderer
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    if _neutralised(source):
        return source

    class Renderer(IPythonRenderer):
        def image(self, text, url, title=None):
            # No source: nbconvert would embed an attachment (and fail on a missing one); an image keeps its alt.
            return HTMLRenderer.image(self, text, "", title)

    try:
        rendered = MarkdownWithMath(renderer=Renderer(escape=False)).render(source)
    except Exception:  # noqa: BLE001 (mistune fails on some sources, e.g. a fence "```&#10;": IndexError)
        # The cell as the text the student typed, never a failure: one cell must not cost a student the grade
        # of every other (the notebook is neutralised before it is recorded).
        rendered = f"<pre>{html.escape(source)}</pre>"
    return "<div>" + _one_line(clean(rendered)) + "</div>"


# The markdown a notebook's cells and outputs may hold that is rendered, in characters (the lecture's: 16,000).
# Rendering runs in the trusted process at some 36 us a character of headings: a red team's 5 MB of them held
# autograde for four minutes and wrote a 46 MB notebook. Past it, a cell shows the start of its text as typed.
MARKDOWN_BUDGET = 100_000
SHOWN_PAST_BUDGET = 1_000


class _Budget:
    def __init__(self):
        self.left = MARKDOWN_BUDGET

    def markdown(self, source: str) -> str:
        if _neutralised(source):
            return source
        if len(source) <= self.left:
            self.left -= len(source)
            return markdown(source)
        self.left = 0
        note = (f"({len(source):,} characters of markdown, past the {MARKDOWN_BUDGET:,} of a notebook that are "
                f"shown rendered: the first {SHOWN_PAST_BUDGET:,} as typed)")
        return "<div>" + _one_line(f"<p>{note}</p><pre>{html.escape(source[:SHOWN_PAST_BUDGET])}</pre>") + "</div>"


def _neutralised(source: str) -> bool:
    """Neutralised already (autograde does it twice): markdown shows it as it is, and it is clean."""
    return source.startswith("<div>") and source.endswith("</div>") and _one_line(clean(source)) == source


def _one_line(html: str) -> str:
    return html.strip().replace("\r", "").replace("\n", "&#10;")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _output(output, budget: _Budget) -> None:
    if output.get("output_type") not in ("display_data", "execute_result"):
        return  # stream and error outputs: every template escapes their text
    data = {}
    given = output.get("data", {})
    for kind, value in given.items():
        if kind == "text/markdown" and "text/html" not in given:
            data["text/html"] = budget.markdown(_text(value))
        elif kind == "text/html":
            text = _text(value)
            data["text/html"] = text if _neutralised(text) else clean(text)
        elif kind == "text/plain":
            data[kind] = _text(value)
        elif kind in KEPT_OUTPUTS and isinstance(value, str) and BASE64.fullmatch(value):
            # Templates write it into an <img src="data:...">: anything but base64 would end the attribute.
            data[kind] = value
    output["data"] = data
    output["metadata"] = {}
    if "execution_count" in output and not isinstance(output["execution_count"], int):
        output["execution_count"] = None


def _notebook_metadata(given) -> dict:
    """The kernel's and language's metadata, each value kept only where the allowlist has it."""
    kept = {}
    info = given.get("language_info")
    if isinstance(info, dict):
        kept["language_info"] = {k: v for k, v in info.items() if isinstance(v, str) and v in LANGUAGE_INFO.get(k, ())}
        kept["language_info"]["name"] = "python"  # nbformat requires one; every course's notebook is Python
        if isinstance(info.get("version"), str) and VERSION.fullmatch(info["version"]):
            kept["language_info"]["version"] = info["version"]
        if info.get("codemirror_mode") == CODEMIRROR_MODE:
            kept["language_info"]["codemirror_mode"] = dict(CODEMIRROR_MODE)
    spec = given.get("kernelspec")
    if isinstance(spec, dict):
        spec = {k: v for k, v in spec.items()
                if k in KERNELSPEC and isinstance(v, str) and KERNELSPEC_TEXT.fullmatch(v)}
        # nbformat requires a name and a display name: where either is not kept, Python's own.
        kept["kernelspec"] = spec if {"name", "display_name"} <= set(spec) else dict(PYTHON_KERNELSPEC)
    return kept


def neutralise(nb) -> None:
    """Every cell of `nb` (an nbformat notebook, changed in place) made safe to render, as the module says."""
    from nbformat.corpus.words import generate_corpus_id

    nb.metadata = _notebook_metadata(nb.metadata)
    budget = _Budget()
    for cell in nb.cells:
        cell.pop("attachments", None)
        given = cell.get("metadata")
        metadata = {k: v for k, v in given.items() if k in CELL_METADATA} if isinstance(given, dict) else {}
        if "tags" in metadata:
            tags = metadata["tags"] if isinstance(metadata["tags"], list) else []
            metadata["tags"] = [t for t in tags if isinstance(t, str) and TAG.fullmatch(t)]
        if cell.cell_type == "raw" and isinstance(given, dict) and given.get("raw_mimetype") in ("text/html",
                                                                                               "text/markdown"):
            metadata["raw_mimetype"] = "text/html"
        cell.metadata = metadata
        if "id" in cell and not (isinstance(cell.id, str) and CELL_ID.fullmatch(cell.id)):
            cell.id = generate_corpus_id()
        source = _text(cell.get("source", ""))
        if cell.cell_type == "markdown":
            cell.source = budget.markdown(source)
        elif cell.cell_type == "code":
            if not isinstance(cell.get("execution_count"), int):
                cell.execution_count = None
            for output in cell.get("outputs", []):
                _output(output, budget)
        else:  # raw, or a type nbformat does not know, which a template may still write out
            cell.source = clean(source)
