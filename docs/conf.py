"""Sphinx configuration of the openprose documentation (MyST Markdown, the furo theme).

Build it with ``sphinx-build -W -b html docs docs/_build/html`` after
``pip install -e '.[docs]'``; nothing is fetched from the network."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "openprose"
author = "the openprose authors"
copyright = "2026, the openprose authors"

extensions = [
    "myst_parser",
    "sphinx_click",
    "openprose_docs",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "tutorial/*.prose", "tutorial/*.yaml"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# `prose` fences are the language's own: shown as plain text (no Pygments lexer exists for it).
highlight_language = "text"
html_theme = "furo"
html_title = "openprose"
html_static_path: list[str] = []
# The pages are built offline: no intersphinx inventories, no remote images.
intersphinx_mapping: dict[str, tuple[str, None]] = {}
nitpicky = False
suppress_warnings = ["misc.highlighting_failure"]
