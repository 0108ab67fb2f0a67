"""The documentation's structure: every page is part of the Sphinx build.

Sphinx -W warns about an .rst page outside every toctree, but skips a page
whose suffix it has no parser for without a word: a Markdown page needs
the parser in docs/conf.py and docs/requirements.txt and an entry in the
toctree.  (tests/test_first_command.py builds the docs with -W.)
"""
from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def toctree_entries() -> set[str]:
    """The pages listed in docs/index.rst's toctree."""
    text = (DOCS / "index.rst").read_text()
    match = re.search(r"^\.\. toctree::\n((?:[ \t]+.*\n|\n)+)", text,
                      re.MULTILINE)
    assert match, "docs/index.rst has no toctree"
    return {line.strip() for line in match.group(1).splitlines()
            if line.strip() and not line.strip().startswith(":")}


def test_every_page_is_in_the_toctree() -> None:
    pages = {path.stem for suffix in ("*.rst", "*.md")
             for path in DOCS.glob(suffix)} - {"index"}
    assert pages <= toctree_entries(), pages - toctree_entries()


def test_markdown_pages_have_a_parser() -> None:
    if not any(DOCS.glob("*.md")):
        return
    conf = (DOCS / "conf.py").read_text()
    assert re.search(r"extensions = \[[^\]]*\"myst_parser\"", conf), conf
    assert '".md": "markdown"' in conf
    requirements = (DOCS / "requirements.txt").read_text()
    assert re.search(r"^myst-parser\b", requirements, re.MULTILINE)
