"""Docstrings that are text the user reads (--help, the Definitions of summary.md and
stabilization.md), had under ``python -OO`` too: -OO (PYTHONOPTIMIZE=2) strips docstrings to
None, and those sections came out empty, --help's text as the config dataclass's signature."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any


def module_docstring(doc: str | None, path: str) -> str:
    """A module's docstring, given as its ``__doc__`` and ``__file__``: read from the file where
    -OO stripped it (a script loaded without an entry in sys.modules has one too); "" where
    neither is to be had."""
    if doc is not None:
        return doc
    try:
        return ast.get_docstring(ast.parse(Path(path).read_text(encoding="utf-8")),
                                 clean=False) or ""
    except (OSError, SyntaxError, ValueError):
        return ""


def docstring(obj: Any) -> str:
    """`obj`'s docstring (a function's or a class's), read from its source where -OO stripped
    it; "" where neither is to be had (no docstring, or no source beside the bytecode)."""
    if obj.__doc__ is not None:
        return str(obj.__doc__)
    import inspect  # here: where docstrings are kept (no -OO), nothing reads the source
    import textwrap

    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return ""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ""
    return ast.get_docstring(node, clean=False) or ""
