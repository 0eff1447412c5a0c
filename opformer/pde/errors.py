"""The one exception type of the data layer."""

from __future__ import annotations

__all__ = ["DataError", "MissingKeyError", "RecipeError"]


class DataError(ValueError):
    """Bad data or a bad data request.

    Raised for a missing file, a missing key, arrays of inconsistent shapes, a resolution that is not a
    stride of the stored one, NaN in the data, an unwritable output path, or a recipe that does not match
    the file it should describe. The message always names the file and, where it applies, the key and the
    expected versus the found shape.
    """


class MissingKeyError(DataError):
    """A data file lacks an array the request names (the command-line tools add how to name other arrays).

    ``key``: the missing array's name; ``path``: the file; ``available``: the names the file holds (each None when
    not known), for a caller that words the refusal itself."""

    def __init__(self, message: str, *, key=None, path=None, available=None):
        super().__init__(message)
        self.key, self.path, self.available = key, path, available


class RecipeError(DataError):
    """A recipe value that its kind of data set refuses (raised by :func:`opformer.pde.generate.make_recipe`).

    ``key``: the refused recipe key, dotted for a nested one (``"resolution"``, ``"grf.modes"``); ``value``: the
    value found there; ``allowed``: what the key accepts, where ``{other_key}`` stands for another recipe key the
    condition depends on (written with ``.format``: the key's own name in the message, a command-line flag for the
    command-line tools); ``nullable``: whether null is accepted too. A caller words the refusal in its own terms
    from these; the message is ``bad PROBLEM recipe: KEY must be [null or ]ALLOWED, found VALUE``."""

    def __init__(self, problem: str, key: str, value, allowed: str, *, nullable: bool = False):
        self.problem, self.key, self.value, self.allowed, self.nullable = problem, key, value, allowed, nullable
        super().__init__(f"bad {problem} recipe: {self.describe()}")

    def describe(self, names=None) -> str:
        """``KEY must be [null or ]ALLOWED, found VALUE``; ``names`` ({recipe key: word}) names the other keys that
        ``allowed`` refers to (default: by their keys)."""
        return f"{self.key} must be {'null or ' if self.nullable else ''}{self.allowed_text(names)}, found {self.value!r}"

    def allowed_text(self, names=None) -> str:
        """``allowed`` with the recipe keys it refers to named by ``names`` ({key: word}; default: the key itself)."""
        import string

        fields = {f for _, f, _, _ in string.Formatter().parse(self.allowed) if f}
        return self.allowed.format(**{f: (names or {}).get(f, f) for f in fields})
