"""Reading the JSON records that runs leave (``metrics.json``, ``rollout.json``, ...), as the study scripts in
``scripts/`` do: one reader, one kind of error line for a file that is not a record."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["RecordError", "read_json_object"]


class RecordError(ValueError):
    """A JSON record that cannot be read; its message is one line naming the file."""


def read_json_object(path) -> dict:
    """The JSON object in the file ``path``.  A file that cannot be read, is not JSON or holds something other than
    a JSON object raises :class:`RecordError` ``"PATH: not a readable NAME (WHY)"``, NAME being the file's name
    (``runs/a/metrics.json: not a readable metrics.json (Expecting value: line 1 column 1 (char 0))``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # JSON is UTF-8, whatever the locale
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RecordError(f"{path}: not a readable {path.name} ({why})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a readable {path.name} (a JSON object is expected)")
    return data
