"""Limits on what users hand voxledger: plan YAML, JSON documents and the excerpts errors echo.

A hostile or broken input must end in one short error, fast: a YAML plan is refused past
``MAX_PLAN_BYTES`` or ``MAX_YAML_NODES`` nodes counted with every alias expanded (a
"billion laughs" plan is a few hundred bytes that expands to 10^9 nodes: it is refused before
anything expands it), JSON nested deeper than Python's parser can follow is refused rather than
crashing, and an error quotes at most ``EXCERPT_CHARS`` of any value.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from voxledger.schemas.errors import VoxledgerError

MAX_PLAN_BYTES = 4 * 1024 * 1024
"""Plans are a few kilobytes; anything past this is not a plan."""
MAX_YAML_NODES = 200_000
"""YAML nodes a document may stand for with every alias expanded."""
EXCERPT_CHARS = 120
"""The most characters of one input value an error message quotes."""


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was when cut."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def load_yaml(text: str, source: str, error: type[VoxledgerError]) -> Any:
    """Parse one YAML document with the limits above; ``error`` (naming ``source``) otherwise."""
    if len(text) > MAX_PLAN_BYTES:
        raise error(f"{source} is {len(text):,} characters, more than the {MAX_PLAN_BYTES:,} a plan may hold; is it the right file?")
    loader = yaml.SafeLoader(text)  # plain data only
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, source, error)
        return loader.construct_document(node)
    except RecursionError as exc:
        raise error(f"{source} is nested too deeply to read; a plan is a few levels of mappings and lists") from exc
    except yaml.YAMLError as exc:
        raise error(f"{source} is not readable YAML: {excerpt(str(exc), 400)}") from exc
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expanded_size(root: yaml.Node, source: str, error: type[VoxledgerError]) -> None:
    """Count nodes as if every alias were copied (memoised per node, so it costs the file's size)."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_YAML_NODES:
                raise error(
                    f"{source} expands to more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded; "
                    "a plan repeats nothing that much: write it without nested aliases"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise error(f"{source} holds an alias that contains itself (line {node.start_mark.line + 1}); plans are trees, not cycles")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def load_json(data: str | bytes, source: str, error: type[VoxledgerError]) -> Any:
    """Parse JSON; ``error`` naming ``source`` for bytes that are not UTF-8 JSON or nest too deeply."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise error(f"{source}: JSON nested too deeply to read (thousands of levels); no voxledger document nests like that") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{source}: not valid UTF-8 JSON ({excerpt(str(exc), 200)})") from exc
