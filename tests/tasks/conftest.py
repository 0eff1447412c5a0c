"""Fixtures of the task tests."""

import pytest


@pytest.fixture
def array_checks(monkeypatch):
    """The names of the arguments a trained model's input check reads (``opformer.tasks.artifact._user_array``), in
    the order of the calls, filled while the test runs."""
    from opformer.tasks import artifact

    seen = []
    real = artifact._user_array

    def counting(values, name):
        seen.append(name)
        return real(values, name)

    monkeypatch.setattr(artifact, "_user_array", counting)
    return seen
