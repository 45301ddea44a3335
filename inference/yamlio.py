"""YAML reading shared by every config file of the project (presets, scenarios, options).

PyYAML implements YAML 1.1, whose float syntax needs a dot: ``1e9`` and
``3e-4`` come back as *strings*. Every file here writes numbers that way, so
the loader below reads them as the numbers they are, once, for everyone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO, Any

import yaml


class NumberFriendlyLoader(yaml.SafeLoader):
    """SafeLoader that also reads exponent-only floats such as ``1e9`` or ``-3E-4``."""


NumberFriendlyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def safe_load(text_or_stream: str | IO[str]) -> Any:
    """`yaml.safe_load`, reading exponent-only floats as numbers."""
    return yaml.load(text_or_stream, Loader=NumberFriendlyLoader)  # noqa: S506 (a SafeLoader)


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """One line: where (1-based line and column) and what, instead of PyYAML's multi-line
    message that quotes the source and names the stream "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def load_yaml_file(path: Path, what: str) -> Any:
    """Read a YAML file; a parse error becomes a ValueError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return safe_load(fh)
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {path}: malformed YAML at {describe_yaml_error(exc)}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not UTF-8 text") from None
