"""``save_pretrained(directory)`` with a directory that is not a path: one line naming ``directory``, never a
TypeError from pathlib, and never the working directory written into for an empty string."""

import pytest

import opformer
from opformer.config import ConfigError


@pytest.mark.parametrize("directory", [None, "", 3, b"my-model"])
def test_a_directory_that_is_not_a_path_is_refused_naming_it(directory, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # empty: "" (the working directory) was accepted there and written into
    model = opformer.load("burgers-gt")
    with pytest.raises(ConfigError, match=r"^directory must be a path .*got ") as err:
        model.save_pretrained(directory)
    assert repr(directory) in str(err.value)
    assert not any(tmp_path.iterdir())
