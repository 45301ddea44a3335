"""Docstrings that are text the user reads (--help, the Definitions of summary.md and
stabilization.md), had under ``python -OO`` too: -OO (PYTHONOPTIMIZE=2) strips docstrings to
None, and those sections came out empty, --help's text as the config dataclass's signature."""

from __future__ import annotations

from typing import Any


def docstring(obj: Any) -> str:
    """`obj`'s docstring (a module's or a function's), read from its source where -OO stripped
    it; "" where neither is to be had (no docstring, or no source beside the bytecode)."""
    if obj.__doc__ is not None:
        return str(obj.__doc__)
    # imported here: where docstrings are kept (no -OO), --help loads none of them
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return ""
    node = tree if inspect.ismodule(obj) else tree.body[0]
    if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ""
    return ast.get_docstring(node, clean=False) or ""
