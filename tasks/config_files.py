"""Reading a YAML config file with bounds, before LightningCLI (jsonargparse) reads it again.

YAML aliases (``*name``) repeat an anchored node without copying it, so ten short lines can
describe a billion strings ("billion laughs"). ``yaml.safe_load`` builds them as shared Python
objects in an instant, but jsonargparse copies and walks the expanded tree: gigabytes and minutes.
:func:`read_config_file` refuses such a file first, from the composed node graph (each shared
node counted once, so the check is as cheap as parsing): a config file may hold at most
:data:`MAX_CONFIG_BYTES` and expand to at most :data:`MAX_CONFIG_NODES` nodes, aliases followed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_CONFIG_BYTES = 1_000_000
"""Size of one config file (1 MB); the shipped configs are under 4 KB."""

MAX_CONFIG_NODES = 100_000
"""Scalars, lists and mappings of one config file once its aliases are expanded; the shipped configs have
a few hundred."""


def read_config_file(path: str | Path) -> Any:
    """The content of a YAML config file (``yaml.safe_load``), refused past the bounds of this module.

    Raises:
        ValueError: naming the file: larger than :data:`MAX_CONFIG_BYTES`, more than
            :data:`MAX_CONFIG_NODES` nodes with its aliases expanded, recursive aliases, nesting
            deeper than Python's recursion limit, or not valid YAML (or UTF-8).
    """
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: {size:,} bytes; a config file may have at most {MAX_CONFIG_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            expanded = expanded_size(node)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        if expanded > MAX_CONFIG_NODES:
            raise ValueError(
                f"{path}: its aliases (*name) expand to {expanded:,} values, more than the {MAX_CONFIG_NODES:,} a "
                f"config file may hold; write the values out instead of nesting aliases"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from error
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a config file") from None
    finally:
        loader.dispose()


def expanded_size(root: yaml.Node) -> int:
    """Nodes of the tree ``root`` stands for once every alias is replaced by a copy of its node.

    A shared node's size is computed once (the graph is walked, not the tree), so this takes time
    linear in the file even when the tree is astronomically large.

    Raises:
        ValueError: For a recursive alias (a node that contains itself).
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ValueError("a recursive alias: a node that contains itself")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []
