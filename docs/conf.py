"""Sphinx configuration for nvshmem-dsl (no extensions that need the network)."""
project = "nvshmem-dsl"
author = "nvshmem-dsl developers"
copyright = "nvshmem-dsl developers"
release = "0.1.0"

extensions = []
master_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
highlight_language = "python"
# The generated reference pages are included from ../generated/docs/.
