"""Sphinx configuration for nvshmem-dsl (no extensions that need the network)."""
project = "nvshmem-dsl"
author = "nvshmem-dsl developers"
copyright = "nvshmem-dsl developers"
release = "0.1.0"

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))
extensions = ["docstrings"]  # docs/_ext/docstrings.py: a function's docstring, read from its source
master_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
highlight_language = "python"
# The generated reference pages are included from ../generated/docs/.
