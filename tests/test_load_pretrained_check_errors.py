"""``check_error`` of something that has no card to check against: one LoadError naming it, not a
FileNotFoundError or KeyError from reading ``card.json``."""

import json
import shutil

import pytest

from opformer.tasks.artifact import LoadError
from opformer.tasks.pretrained import check_error, pretrained_path


def test_a_name_that_is_neither_bundled_nor_a_directory_is_refused_naming_the_bundled_ones(tmp_path):
    with pytest.raises(LoadError, match=r"^no-such-model: neither a bundled model \(.*burgers-ft"):
        check_error("no-such-model", workdir=tmp_path)


def test_a_saved_model_without_a_card_is_refused_saying_what_is_missing(tmp_path):
    saved = tmp_path / "mine"
    shutil.copytree(pretrained_path("burgers-gt"), saved)
    (saved / "card.json").unlink()
    with pytest.raises(LoadError, match="card.json"):
        check_error(saved, workdir=tmp_path)


@pytest.mark.parametrize("card", ["{not json", json.dumps({"description": "no check"}), json.dumps({"check": 3})])
def test_a_card_without_a_check_is_refused_naming_the_file(tmp_path, card):
    saved = tmp_path / "mine"
    shutil.copytree(pretrained_path("burgers-gt"), saved)
    (saved / "card.json").write_text(card)
    with pytest.raises(LoadError, match="card.json: not a model card with a 'check'"):
        check_error(saved, workdir=tmp_path)
