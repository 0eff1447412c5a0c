"""The one exception type of the data layer."""

from __future__ import annotations

__all__ = ["DataError", "MissingKeyError"]


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
