"""logits.json: JSON with nesting on separate lines, rows and records compact."""

from __future__ import annotations

import json
from pathlib import Path

def _scalar(x) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def _fmt(obj, level: int) -> str:
    """JSON with nesting on separate lines, but lists of scalars, logit rows and per-position
    records each on one line."""
    compact = lambda o: json.dumps(o, separators=(",", ":"), allow_nan=False)  # noqa: E731
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if "top_ids" in obj or all(_scalar(v) or (isinstance(v, list) and all(map(_scalar, v))) for v in obj.values()):
            return compact(obj)
        items = [f"{inner}{json.dumps(k)}: {_fmt(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(map(_scalar, obj)):
            return compact(obj)
        return "[\n" + ",\n".join(inner + _fmt(v, level + 1) for v in obj) + "\n" + pad + "]"
    return compact(obj)


def write_json(path: Path, obj) -> None:
    text = _fmt(obj, 0) + "\n"
    assert json.loads(text) == obj
    path.write_text(text)
