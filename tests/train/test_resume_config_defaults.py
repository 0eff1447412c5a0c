"""A run recorded before a model field existed resumes as the same run: the field it lacks had the model's default
value (``coord_features`` of the FNOs, ``raw``), so a resume that sets that value is no difference and one that sets
another value is listed as one."""

from opformer.train.run import _diff, _config_for_comparison


def _run(model: dict) -> dict:
    return {"task": "navier-stokes", "model": model, "data": {}, "train": {}}


OLD = {"name": "fno2d", "width": 20, "modes": 12, "num_layers": 4, "head_width": 64, "time_conditioning": "norm"}


def test_a_model_field_missing_from_an_old_record_takes_its_default():
    old = _config_for_comparison(_run(OLD))
    assert old["model"]["coord_features"] == "raw"
    assert old == _config_for_comparison(_run({**OLD, "coord_features": "raw"}))


def test_another_value_of_that_field_is_a_difference():
    old = _config_for_comparison(_run(OLD))
    new = _config_for_comparison(_run({**OLD, "coord_features": "periodic"}))
    assert old != new
    assert "model.coord_features" in _diff(old, new)


def test_a_model_section_the_models_refuse_is_compared_as_written():
    bad = {"name": "fno2d", "width": -1}
    assert _config_for_comparison(_run(bad))["model"] == bad
