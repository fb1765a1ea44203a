"""Sphinx configuration of ftkit's documentation (``make docs`` builds it with warnings as errors)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # document the checkout, installed or not

import ftkit  # noqa: E402

project = "ftkit"
author = "the ftkit authors"
copyright = "the ftkit authors, BSD-3-Clause"  # noqa: A001 - Sphinx's name
release = version = ftkit.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: ```{directive} fences, definition lists, heading anchors for cross-page links.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference: numpydoc docstrings, signatures with their type hints, members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
numpydoc_show_class_members = False      # autodoc lists the members (no autosummary stubs)
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping = {}  # no network at build time: cross-references stay inside these pages
suppress_warnings = ["myst.header"]

# Doctests (``sphinx-build -b doctest``): every example runs in a scratch directory of its own.
doctest_global_setup = """
import os, tempfile
import numpy as np
import ftkit
_docs_cwd = os.getcwd()
_docs_tmp = tempfile.TemporaryDirectory(prefix="ftkit-docs-")
os.chdir(_docs_tmp.name)
"""
doctest_global_cleanup = """
os.chdir(_docs_cwd)
_docs_tmp.cleanup()
"""

html_theme = "furo"
html_title = f"ftkit {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
