"""Where the bundled models live and what they are called: standard library only, so that the command line can name
them in its help without importing torch.  Loading, cards and checks are in :mod:`opformer.tasks.pretrained`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["PRETRAINED_DIR", "list_pretrained", "known_pretrained", "pretrained_path"]

#: where the bundled models live (inside the installed package)
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"


def list_pretrained() -> list[str]:
    """Names of the bundled models (``opformer.load(NAME)`` loads one)."""
    if not PRETRAINED_DIR.is_dir():
        return []
    return sorted(p.name for p in PRETRAINED_DIR.iterdir() if (p / "card.json").is_file())


def known_pretrained() -> str:
    """The bundled models' names as one phrase for messages and help texts ("none" when there are none)."""
    return ", ".join(list_pretrained()) or "none"


def pretrained_path(name: str) -> Optional[Path]:
    """The directory of the bundled model ``name``, or None when there is no such bundled model."""
    name = str(name)
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    path = PRETRAINED_DIR / name
    return path if (path / "card.json").is_file() else None
