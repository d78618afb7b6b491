"""Sphinx configuration of pyhorovod's documentation: the user guide (MyST Markdown pages, some of which
include README sections so that each text exists once) and the API reference (autodoc from the
docstrings, Google style through napoleon). Build: python -m sphinx -W -b html docs build/docs"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pyhorovod import __version__  # noqa: E402  (after the path set-up, so the checkout's package is used)

project = "pyhorovod"
author = "the pyhorovod authors"
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"  # ships with Sphinx: the build needs no download

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
myst_heading_anchors = 3
autodoc_preserve_defaults = True
