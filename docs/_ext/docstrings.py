"""``.. docstring:: path/to/module.py function``: a function's signature and docstring, read
from the source file (no import: the docs build needs neither Numba nor a GPU), so that a page
says what the code's own documentation says instead of restating it.

The signature drops the parameters Numba's ``@intrinsic`` typers take first (``typingctx``)
and the one Triton passes its builtins (``_semantic``); the docstring is reStructuredText.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

HIDDEN_PARAMS = ("typingctx", "_semantic")


def signature_and_doc(path: Path, name: str) -> tuple[str, str]:
    """``name(args)`` and the cleaned docstring of top-level function ``name`` in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            doc = ast.get_docstring(node)
            if not doc:
                raise ValueError(f"{path}: {name} has no docstring")
            args = [a.arg for a in node.args.args if a.arg not in HIDDEN_PARAMS]
            if node.args.kwonlyargs:  # keyword-only: shown after "*", with their defaults
                args.append("*")
                args += [a.arg if d is None else f"{a.arg}={ast.unparse(d)}"
                         for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)]
            return f"{name}({', '.join(args)})", inspect.cleandoc(doc)
    raise ValueError(f"{path}: no top-level function {name!r}")


class Docstring(SphinxDirective):
    required_arguments = 2  # a source file (relative to the docs folder), a function name

    def run(self):
        path = Path(self.env.srcdir) / self.arguments[0]
        self.env.note_dependency(str(path))
        try:
            sig, doc = signature_and_doc(path, self.arguments[1])
        except (OSError, SyntaxError, ValueError) as exc:
            raise self.error(str(exc)) from None
        term = nodes.paragraph()
        term += nodes.literal(text=sig)
        body = nodes.block_quote()
        self.state.nested_parse(StringList(doc.splitlines(), source=str(path)), self.content_offset, body)
        return [term, body]


def setup(app):
    app.add_directive("docstring", Docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
