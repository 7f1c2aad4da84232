"""Every leaf of a JSON value by its path: how the release-surface tests compare reports and
summaries of neighbouring streams key by key."""

from __future__ import annotations


def leaf_paths(value, prefix: str = "") -> dict[str, object]:
    """Every leaf of a JSON value by its path (list items by index).

    >>> leaf_paths({"a": [1, {"b": 2}], "c": None})
    {'/a/0': 1, '/a/1/b': 2, '/c': None}
    """
    if isinstance(value, dict):
        return {p: v for k, item in value.items()
                for p, v in leaf_paths(item, f"{prefix}/{k}").items()}
    if isinstance(value, list):
        return {p: v for i, item in enumerate(value)
                for p, v in leaf_paths(item, f"{prefix}/{i}").items()}
    return {prefix: value}
