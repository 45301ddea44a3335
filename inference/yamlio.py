"""YAML reading shared by every config file of the project (presets, scenarios, options),
and the checks that say why a path cannot be read as a file (`unusable_path`, `not_a_file`).

PyYAML implements YAML 1.1, whose float syntax needs a dot: ``1e9`` and
``3e-4`` come back as *strings*. Every file here writes numbers that way, so
the loader below reads them as the numbers they are, once, for everyone.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml

from inference.messages import shown

MERGE_TAG = "tag:yaml.org,2002:merge"
VALUE_TAG = "tag:yaml.org,2002:value"   # a bare `=` key, which SafeLoader reads as the string
#: How deep values may nest: every file here nests a handful of levels. PyYAML composes a
#: document recursively, a few frames a level, and `[[[...` 300 deep was a RecursionError.
MAX_DEPTH = 100
#: How many values aliases may add by repeating the nodes they name (a `<<: *base` repeats
#: a device's few dozen). Nine levels of ten aliases each (a "billion laughs") load at once as
#: shared objects, but an error message that echoed one (its repr) ran for ever.
MAX_ALIASED_VALUES = 100_000


class NumberFriendlyLoader(yaml.SafeLoader):
    """SafeLoader that also reads exponent-only floats such as ``1e9`` or ``-3E-4``, refuses a
    key given twice in one mapping, resolves merge keys (``<<``) itself, and refuses a
    document nested more than MAX_DEPTH levels deep or whose aliases repeat more than
    MAX_ALIASED_VALUES values (or are recursive)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        # Each merge source's pairs with its own merges resolved: {key: (key node, value node)}.
        self._resolved: dict[yaml.Node, dict[Any, tuple[yaml.Node, yaml.Node]]] = {}
        self._depth = 0     # of the node being composed (MAX_DEPTH)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"values nested more than {MAX_DEPTH} levels deep",
                self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _check_aliases(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML's own merge (`flatten_mapping`) rewrites a merge source's node in place and
        # changed in 6.0.4, which keeps the first `x` of a source that merges an `x` and also
        # gives its own: `c: {<<: *b}` got 1 from `b: {<<: {x: 1}, x: 2}` (2 in 6.0.3 and by the
        # spec). So the merge is done here, on nodes left as written, and never calls it.
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep=deep)   # the base class says what is wrong
        out = {}
        for key, (_, value_node) in self._merged_pairs(node, ()).items():
            try:
                out[key] = self.construct_object(value_node, deep=deep)
            except yaml.constructor.ConstructorError as exc:
                if exc.problem_mark is value_node.start_mark:   # a value refused: name its key
                    exc.problem = f"{shown(key, quote=False)}: {exc.problem}"
                raise
        return out

    def _merged_pairs(self, node: yaml.MappingNode, merging: tuple[yaml.Node, ...]
                      ) -> dict[Any, tuple[yaml.Node, yaml.Node]]:
        """`node`'s pairs with its merge keys resolved as https://yaml.org/type/merge.html says:
        the mapping's own keys override merged ones, and of a sequence of mappings merged, an
        earlier one overrides a later one. A key given twice in the mapping is refused."""
        if node in self._resolved:
            return self._resolved[node]
        if node in merging:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", merging[-1].start_mark,
                "found a mapping that merges itself", node.start_mark)
        merged: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        own: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        # The keys as written, a merge key too (YAML keys are unique; PyYAML 6.0.3 and 6.0.4
        # disagree on which of two `<<` wins), kept apart from a quoted "<<" key.
        given: dict[tuple[bool, Any], yaml.Node] = {}
        for key_node, value_node in node.value:
            is_merge = key_node.tag == MERGE_TAG
            key = "<<" if is_merge else self._hashable_key(node, key_node)
            if (is_merge, key) in given:
                # PyYAML keeps the last of two equal keys without a word: a scenario's second
                # `workload:` block replaced the first whole, its fields falling back to their
                # defaults. Keys are compared by value: both uses of an alias are one node.
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r} (first given on line "
                    f"{given[is_merge, key].start_mark.line + 1})", key_node.start_mark)
            given[is_merge, key] = key_node
            if not is_merge:
                own[key] = (key_node, value_node)
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in reversed(sources):   # the earlier source is applied last: it wins
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"a merge key (<<) takes a mapping or a list of mappings, "
                        f"not a {source.id}", source.start_mark)
                merged.update(self._merged_pairs(source, (*merging, node)))
        merged.update(own)   # a key of the mapping itself overrides a merged one
        self._resolved[node] = merged
        return merged

    def _hashable_key(self, node: yaml.MappingNode, key_node: yaml.Node) -> Any:
        if key_node.tag == VALUE_TAG:
            return "="
        key = self.construct_object(key_node, deep=False)   # a hashable key is a scalar: whole
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "found unhashable key", key_node.start_mark) from None
        return key


def _children(node: yaml.Node) -> list[tuple[yaml.Node, bool]]:
    """(child, whether it is a merge key's value) of each node below `node`."""
    if isinstance(node, yaml.SequenceNode):
        return [(child, False) for child in node.value]
    if isinstance(node, yaml.MappingNode):
        return [part for key, value in node.value
                for part in ((key, False), (value, key.tag == MERGE_TAG))]
    return []


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a document whose aliases repeat more than MAX_ALIASED_VALUES values, or name a
    node from inside it (a recursive structure, which the readers here cannot walk; one
    within a merge key's value is left to `_merged_pairs`, which names a mapping merging
    itself). An alias is the node it names, so each node's size (its own and its children's)
    is counted once, in a loop: aliases of nested nodes may nest deeper than recursion goes."""
    sizes: dict[yaml.Node, int] = {}
    open_nodes: set[yaml.Node] = set()      # those whose children are being counted
    stack: list[tuple[yaml.Node, bool, bool]] = [(root, False, False)]   # node, merged, counted
    while stack:
        node, merged, counted = stack.pop()
        if counted:
            open_nodes.discard(node)
            sizes[node] = 1 + sum(sizes.get(child, 0) for child, _ in _children(node))
            continue
        if node in sizes:
            continue
        if node in open_nodes:
            if merged:
                continue
            raise yaml.composer.ComposerError(
                None, None, "an alias names a node it is part of (a recursive structure)",
                node.start_mark)
        open_nodes.add(node)
        stack.append((node, merged, True))
        stack.extend((child, merged or merge, False) for child, merge in _children(node))
    if sizes[root] - len(sizes) > MAX_ALIASED_VALUES:
        raise yaml.composer.ComposerError(
            None, None, f"aliases repeat values more than {MAX_ALIASED_VALUES:,} times (an alias "
                        f"of an alias of ...: a 'billion laughs')", root.start_mark)


def int_digit_limit() -> int:
    """The most digits Python's int() reads from text (``sys.get_int_max_str_digits``: 4300 by
    default; 0, no limit, before Python 3.10.7). A number past it was int()'s own ValueError,
    naming no file and advising ``sys.set_int_max_str_digits()``."""
    return int(getattr(sys, "get_int_max_str_digits", lambda: 0)())


def _checked_scalar(construct: Callable[[Any, yaml.ScalarNode], Any]
                    ) -> Callable[[Any, yaml.ScalarNode], Any]:
    """`construct` (PyYAML's int, float, bool or timestamp constructor), refusing a value it
    cannot read with a ConstructorError, which every reader here names its file by. PyYAML's
    own refusals were bare: ``timesteps: 1000...0`` past Python's 4300-digit limit on int()
    of a string was a ValueError out of train.py (a traceback), ``!!int abc`` too, ``!!bool
    abc`` a KeyError."""
    def checked(loader: Any, node: yaml.ScalarNode) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, KeyError, AttributeError):
            limit = int_digit_limit()
            digits = sum(c.isdigit() for c in str(node.value))
            problem = (f"a number of more than {limit} digits" if limit and digits > limit
                       else f"{shown(node.value)} is not a valid {node.tag.rpartition(':')[2]}")
            raise yaml.constructor.ConstructorError(None, None, problem,
                                                    node.start_mark) from None
    return checked


for _kind in ("int", "float", "bool", "timestamp"):
    NumberFriendlyLoader.add_constructor(
        f"tag:yaml.org,2002:{_kind}",
        _checked_scalar(getattr(yaml.constructor.SafeConstructor, f"construct_yaml_{_kind}")))


#: A number written with an exponent, with or without a dot and the exponent's sign. YAML 1.1's
#: floats need both, so PyYAML's own SafeLoader reads ``1e9`` and ``2.29e14`` as strings.
EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
NumberFriendlyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))

_REFUSED_TEXT = re.compile(r", got '([^'\\]*)'$")


def with_text_number_hint(message: str) -> str:
    """`message`, the refusal of a mapping given in Python, with a hint where the value it
    refuses is text that `yaml.safe_load` made of a number in a YAML file (``'2.29e14'``, as
    docs/WORKLOADS.md's examples write numbers): a file this module reads gives the number. Only
    for a mapping: in a file read here, such text was quoted on purpose."""
    found = _REFUSED_TEXT.search(message)
    if found is None or not EXPONENT_FLOAT.match(found[1]) \
            or not isinstance(yaml.safe_load(found[1]), str):
        return message
    return (f"{message} (PyYAML's yaml.safe_load reads {found[1]}, a number with no dot or "
            f"no exponent sign, as text: pass the file's path instead, or load the file with "
            f"inference.yamlio.safe_load)")


def safe_load(text_or_stream: str | IO[str]) -> Any:
    """`yaml.safe_load`, reading exponent-only floats as numbers, refusing duplicate keys and
    merging `<<` keys as the YAML spec says (see `NumberFriendlyLoader`)."""
    return yaml.load(text_or_stream, Loader=NumberFriendlyLoader)  # noqa: S506 (a SafeLoader)


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """One line: where (1-based line and column) and what, instead of PyYAML's multi-line
    message that quotes the source and names the stream "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def path_version(path: Path) -> tuple[object, ...]:
    """What identifies the file at `path` now: its absolute path, inode, size and change times
    (a stat, not a read: caches of traces and hyper-parameter YAMLs key on it, checked on every
    use). A path that cannot be stat-ed is its own key: its loader names what is wrong."""
    try:
        st = path.stat()
    except (OSError, ValueError):   # ValueError: a NUL byte in the name
        return (str(path),)
    return (str(path.absolute()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def load_yaml_file(path: Path, what: str) -> Any:
    """Read a YAML file; a parse error becomes a ValueError naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return safe_load(fh)
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {shown(path, quote=False)}: malformed YAML at "
                         f"{describe_yaml_error(exc)}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {shown(path, quote=False)} is not UTF-8 text") from None
    except OSError as exc:   # no permission to read it, an I/O error: a traceback in train.py
        raise ValueError(f"{what} {shown(path, quote=False)} {cannot_read(exc)}") from None


def cannot_read(exc: OSError) -> str:
    """Why a file could not be read, to follow its name: "cannot be read: Permission denied"
    (the OS error's own text, not its str, which repeats the path)."""
    return f"cannot be read: {exc.strerror or exc}"


MAX_PATH_DEPTH = 256


def unusable_path(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot name a file at all, or None (also when it merely does not exist).

    pathlib's ``exists``/``is_file``/``is_dir`` answer False for a missing file but raise for a
    name the file system refuses: a traceback (OSError, "File name too long") for a 300-character
    file name given as a scenario, hardware file or trace, or a bare "embedded null byte".
    A path more than MAX_PATH_DEPTH folders deep is refused too: pathlib's `mkdir(parents=True)`
    recurses once per missing folder, and an --out 1100 folders deep ended in a RecursionError.
    """
    try:
        depth = len(Path(path).parts)
    except (TypeError, ValueError):
        depth = 0   # os.stat below names what is wrong with it
    if depth > MAX_PATH_DEPTH:
        return f"it is {depth} folders deep, more than the {MAX_PATH_DEPTH} taken"
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeEncodeError:   # a ValueError too: "\ud800" in a YAML file was "a NUL byte"
        return "it holds a lone surrogate (such as \\ud800), which a file name cannot"
    except ValueError:
        return "it holds a NUL byte"
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def not_a_file(path: str | os.PathLike[str], kind: str) -> str:
    """What keeps `path`, which is not a regular file, from being read as `kind` (e.g. "a YAML
    file"), to follow its name in an error: "is a folder, not a YAML file", "is not a regular
    file" (a device such as /dev/null, a pipe) or "does not exist". Only the last was said, so
    a folder or /dev/null "did not exist"."""
    problem = unusable_path(path)
    if problem is not None:
        return f"is not a usable path: {problem}"
    p = Path(path)
    if p.is_dir():
        return f"is a folder, not {kind}"
    if p.exists():
        return "is not a regular file"
    return "does not exist"
