"""Sphinx configuration for the accelerator documentation.

autodoc imports the package to read signatures and docstrings from the C
extension itself, so the extension must be built first (in place, or
installed).  Importing calls no driver, so no GPU is needed.
"""
from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Prefer an in-place build of this checkout; otherwise use what is installed.
if any((ROOT / "accelerator").glob("_accelerator*.so")):
    sys.path.insert(0, str(ROOT))

import accelerator  # noqa: E402

project = "accelerator"
author = "The accelerator developers"
copyright = "the accelerator developers"
release = accelerator.__version__
version = release

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}

exclude_patterns = ["_build", "requirements.txt"]
root_doc = "index"
default_role = "code"
highlight_language = "python3"

nitpicky = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False

html_theme = "alabaster"
html_title = f"accelerator {release}"
# Wide tables scroll within the page (docs/_static/tables.css).
html_static_path = ["_static"]
html_css_files = ["tables.css"]


def _check_api_reference(app):
    """Warn (an error under -W) when a public name is not in api.rst."""
    text = (pathlib.Path(app.srcdir) / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. \w+:: (?:accelerator\.)?(\w+)", text,
                                re.MULTILINE))
    missing = sorted(set(accelerator.__all__) - documented)
    if missing:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "api.rst does not document: %s", ", ".join(missing))


def setup(app):
    app.connect("builder-inited", _check_api_reference)
