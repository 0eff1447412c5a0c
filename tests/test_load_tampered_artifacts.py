"""A damaged or hand-edited saved model is refused by ``opformer.load`` in one line that names what is wrong, before
any network is built from it: never a KeyError or AttributeError, never at the first prediction, and never after
allocating the network an edited ``config.json`` asks for."""

import json
import shutil

import numpy as np
import pytest
import torch

import opformer
import opformer.tasks.artifact as artifact_module
from opformer.tasks.artifact import LoadError
from opformer.tasks.pretrained import pretrained_path


def _saved_model(tmp_path, edit=None, name="model"):
    """A copy of the bundled burgers-gt directory with its config.json passed through ``edit``."""
    out = tmp_path / name
    shutil.copytree(pretrained_path("burgers-gt"), out)
    if edit is not None:
        cfg = json.loads((out / "config.json").read_text())
        edit(cfg)
        (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_a_description_of_a_larger_network_is_refused_before_the_network_is_built(tmp_path, monkeypatch, one_thread):
    # 100 layers of width 4096 would take about 47 GB: the sizes are compared with the weights' first, on the
    # "meta" device, which allocates nothing
    path = _saved_model(tmp_path, lambda c: c["model"].update(d_model=4096, num_layers=100, dim_feedforward=8192))
    devices = []
    build = artifact_module.build_operator

    def recording(artifact):
        devices.append(torch.get_default_device().type)
        if devices[-1] != "meta":
            raise AssertionError("the network was built in memory before its sizes were checked")
        return build(artifact)

    monkeypatch.setattr(artifact_module, "build_operator", recording)
    with pytest.raises(LoadError) as err:
        opformer.load(path)
    assert devices == ["meta"]
    text = str(err.value)
    assert "do not fit the described model" in text and "\n" not in text
    assert "'model.lift.weight' is (96, 1) in the weights, (4096, 1) in the description" in text


def test_weights_saved_before_a_module_existed_still_load(tmp_path, one_thread):
    # the check before building goes through the modules' own loading (on the meta device), so what they fill in
    # for weights of before (SimpleAttention's output conditioning, identity at its start) is not a missing tensor
    from safetensors.torch import save_file

    def conditioned(cfg):
        cfg["model"].update(kind="fourier", time_conditioning="norm")

    path = _saved_model(tmp_path, conditioned)
    state = artifact_module.build_operator(json.loads((path / "config.json").read_text()))[0].state_dict()
    old = {k: v.contiguous() for k, v in state.items() if ".cond_out." not in k}
    assert len(old) < len(state)
    save_file(old, path / "model.safetensors")
    model = opformer.load(path)
    assert any(".cond_out." in k for k in model.operator.state_dict())


@pytest.mark.parametrize("change, named", [
    (lambda sd: sd.update({"extra": torch.zeros(3)}), "'extra' (3,)"),
    (lambda sd: sd.update({"model.decoder.head.0.bias": torch.zeros(5)}), "'model.decoder.head.0.bias' is (5,)"),
    (lambda sd: sd.pop("model.decoder.head.0.bias"), "lack 'model.decoder.head.0.bias'"),
])
def test_weights_that_do_not_fit_are_refused_naming_the_tensor(tmp_path, change, named, one_thread):
    from safetensors.torch import load_file, save_file

    path = _saved_model(tmp_path)
    state = load_file(path / "model.safetensors")
    change(state)
    save_file(state, path / "model.safetensors")
    with pytest.raises(LoadError, match="do not fit the described model") as err:
        opformer.load(path)
    assert named in str(err.value)


@pytest.mark.parametrize("edit, named", [
    (lambda c: c.update(normalizers=[1]), "'normalizers' must be a dict"),
    (lambda c: c.update(normalizers={"input": "junk"}), "normalizer 'input'"),
    (lambda c: c.update(task_options="x"), "'task_options' must be a dict"),
    (lambda c: c.update(model="transformer1d"), "'model' must be a dict"),
    (lambda c: c.update(grid="hexagonal"), "'grid' must be one of"),
    (lambda c: c.update(input_grid="abc"), "'input_grid' must be a list of grid sizes"),
    (lambda c: c.update(input_grid=[0]), "'input_grid' must be a list of grid sizes"),
    (lambda c: c.pop("input_grid"), "lacks 'input_grid'"),
    (lambda c: c.update(info=[1]), "'info' must be a dict"),
    (lambda c: c.update(keys="a,u"), "'keys' must be a list"),
])
def test_a_damaged_description_is_refused_on_loading(tmp_path, edit, named, one_thread):
    path = _saved_model(tmp_path, edit)
    with pytest.raises(LoadError) as err:
        opformer.load(path).predict(np.zeros((1, 64)))  # refused by load itself, before any prediction
    assert named in str(err.value) and str(path) in str(err.value)


def test_a_description_nested_too_deeply_is_refused_in_one_line(tmp_path):
    path = _saved_model(tmp_path)
    (path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LoadError, match="nested too deeply"):
        opformer.load(path)


def test_a_description_without_a_version_still_loads_and_shows(tmp_path, one_thread):
    path = _saved_model(tmp_path, lambda c: c.pop("version"))
    assert "version not recorded" in repr(opformer.load(path))


@pytest.mark.parametrize("path", [None, "", 3, b"burgers-gt", ["burgers-gt"]])
def test_a_path_that_is_not_one_is_refused_naming_what_was_given(path):
    # Path("") was the working directory (a message about "."), None and bytes a TypeError from pathlib
    with pytest.raises(LoadError, match=r"^path must be a checkpoint.*got ") as err:
        opformer.load(path)
    assert repr(path) in str(err.value) and "burgers-gt" in str(err.value)


class _Payload:
    """A pickle that would create a file when unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_a_file_named_as_a_bundled_model_runs_no_code_and_says_it_hid_the_bundled_one(tmp_path, monkeypatch,
                                                                                      layout):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "code-ran"
    if layout == "file":  # a pickle payload under a bundled model's name in the working directory
        torch.save({"opformer": _Payload(marker)}, tmp_path / "burgers-ft")
    else:  # a directory of that name with such a checkpoint
        (tmp_path / "burgers-ft").mkdir()
        torch.save({"opformer": _Payload(marker)}, tmp_path / "burgers-ft" / "best.ckpt")
    with pytest.raises(LoadError) as err:
        opformer.load("burgers-ft")
    assert not marker.exists()
    text = str(err.value)
    assert "refused" in text and "bundled model" in text and "burgers-ft" in text and "\n" not in text
    assert "pretrained_path('burgers-ft')" in text
    opformer.load(pretrained_path("burgers-ft"))  # the way to the bundled model the message gives
