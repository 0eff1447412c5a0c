"""A task of the user's own, in a module outside the package: how the command line and a fresh process find it
(``OPFORMER_TASKS``, entry points), what a model of it records, and its own data recipe."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

import opformer
import opformer.pde.generate as generate
import opformer.tasks.base as base
from opformer.cli import main
from opformer.config import ConfigError, DataConfig, OpformerWarning
from opformer.pde.storage import PROBLEM_KEYS
from opformer.tasks import get_task, list_tasks, unregister_task

MODULE = "own_heat_mod"
TASK = "own-heat"

# a task that trains on files only: the heat equation's exact solution at t = 1 for nu = 0.01
TASK_SOURCE = '''
import numpy as np
from opformer.data.datasets import FieldDataset, read_blocks, sample_array, stride_for
from opformer.tasks import Bundle, Task, register_task
from opformer.tasks.base import open_pair, split_indices


class OwnHeat(Task):
    name, dim, default_keys = "own-heat", 1, ("u0", "ut")
    description = "heat equation from files"
    models = {"fno": {"name": "fno1d", "width": 8, "modes": 6, "num_layers": 1, "head_width": 8}}
    run_defaults = {"train": {"epochs": 1, "batch_size": 4, "gamma": 0.0}}

    def load(self, data, options, files, splits=("train", "val", "test"), normalizers=None, test_all=False):
        keys, train, test, grid = open_pair(data, self.default_keys, files, 1)
        s = stride_for(grid[0], data.resolution, nodes=False, where=train.describe())
        idx = split_indices(data, train, test, test_all)

        def transform(u0, ut):
            return {"input": sample_array(u0, 1, keys[0], "")[:, ::s, None],
                    "target": sample_array(ut, 1, keys[1], "")[:, ::s, None]}
        x = (np.arange(grid[0]) / grid[0])[::s, None]
        ds = {sp: FieldDataset(read_blocks(test if sp == "test" else train, idx[sp], transform), {"coords": x})
              for sp in splits}
        return Bundle(ds, dict(normalizers or {}), "periodic", (len(x),), (len(x),))


register_task(OwnHeat())
'''

# a recipe of the user's own and a task that generates its default data from it (chunks of 2: several tasks)
RECIPE_SOURCE = '''
import numpy as np
from opformer.pde.generate import RecipeKind, register_recipe
from opformer.pde.grf import sample_rng
from opformer.tasks import Task, register_task


def samples(recipe, indices, device=None):
    n = recipe["resolution"]
    u0 = np.stack([np.sin(2 * np.pi * np.arange(n) / n + sample_rng(recipe["seed"], i).uniform()) for i in indices])
    return {"u0": u0, "ut": u0 * np.exp(-recipe["nu"] * (2 * np.pi) ** 2)}


register_recipe(RecipeKind(
    name="own-heat-recipe", keys=("u0", "ut"), compute=samples, validate=lambda recipe, need: None, shortcuts=None,
    defaults={"problem": "own-heat-recipe", "n_samples": 9, "resolution": 16, "seed": 0, "dtype": "float32",
              "nu": 0.01},
    layout=lambda r: ({"u0": (r["resolution"],), "ut": (r["resolution"],)}, {"x": np.arange(r["resolution"]) / 16}, ()),
    chunk=lambda recipe, device: 2))


class OwnRecipeTask(Task):
    name, dim, default_keys, generator = "own-heat-recipe", 1, ("u0", "ut"), "own-heat-recipe"


register_task(OwnRecipeTask())
'''


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    """``tmp_path/own_heat_mod.py`` (the task above), the working directory there, a data file of 21 samples, and
    everything the test registers forgotten afterwards."""
    (tmp_path / f"{MODULE}.py").write_text(TASK_SOURCE)
    u0 = np.random.default_rng(0).standard_normal((21, 32))
    k = np.fft.rfftfreq(32, 1 / 32)
    ut = np.fft.irfft(np.fft.rfft(u0) * np.exp(-0.01 * (2 * np.pi * k) ** 2), 32)
    np.savez(tmp_path / "heat.npz", u0=u0, ut=ut)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "cache"))
    monkeypatch.delenv("OPFORMER_TASKS", raising=False)
    monkeypatch.setattr(base, "_imported", set(), raising=False)
    yield tmp_path
    for name in (TASK, "own-heat-recipe", "ep-task"):
        unregister_task(name)
    for name in ("own-heat-recipe",):
        generate.RECIPES.pop(name, None)
        PROBLEM_KEYS.pop(name, None)
    for name in (MODULE, "own_recipe_mod", "ep_task_mod", "broken_mod"):
        sys.modules.pop(name, None)


def _fresh(code: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    """``code`` run by a new Python process in ``cwd`` (which has imported nothing of the test's)."""
    environ = {k: v for k, v in os.environ.items() if k != "OPFORMER_TASKS"}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=300)


def test_the_command_line_finds_a_task_named_in_the_environment_by_module_or_file(own_module, monkeypatch, capsys):
    assert main(["train", f"{TASK}-fno", "--data", "heat.npz", "--out", "runs/a", "--no-progress"]) == 2
    assert f"'{TASK}-fno'" in capsys.readouterr().err  # not known without being told
    monkeypatch.setenv("OPFORMER_TASKS", MODULE)  # a module name, found in the working directory
    assert main(["train", f"{TASK}-fno", "--data", "heat.npz", "--out", "runs/a", "--no-progress"]) == 0
    metrics = json.loads((own_module / "runs/a/metrics.json").read_text())
    assert metrics["task"] == TASK and metrics["n_train"] + metrics["n_val"] + metrics["n_test"] == 21
    unregister_task(TASK)
    sys.modules.pop(MODULE)
    monkeypatch.setattr(base, "_imported", set(), raising=False)
    other = own_module / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)  # another working directory: the module by its file
    monkeypatch.setenv("OPFORMER_TASKS", str(own_module / f"{MODULE}.py"))
    assert TASK in list_tasks()
    assert main(["eval", str(own_module / "runs/a"), "--data", str(own_module / "heat.npz")]) == 0


def test_task_modules_that_cannot_be_imported_are_one_line_errors(own_module, monkeypatch, capsys):
    (own_module / "broken_mod.py").write_text("x = 1 / 0\n")
    (own_module / "json.py").write_text("raise SystemExit('never run')\n")  # would shadow the standard module
    cases = {"no_such_task_mod": "OPFORMER_TASKS=no_such_task_mod: no task module 'no_such_task_mod'",
             "broken_mod": "task module broken_mod failed to import: ZeroDivisionError: division by zero",
             "missing.py": "task module file missing.py does not exist",
             "not a module": "task module 'not a module' is neither a module name",
             "json.py": "task module file json.py: another module named json is imported already"}
    for value, expected in cases.items():
        monkeypatch.setenv("OPFORMER_TASKS", value)
        monkeypatch.setattr(base, "_imported", set(), raising=False)
        assert main(["train", f"{TASK}-fno", "--data", "heat.npz", "--out", "runs/b"]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1 and "Traceback" not in err, err
        with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
            get_task("burgers")
    assert not (own_module / "runs").exists()


def test_a_model_records_its_task_module_and_a_fresh_process_is_told_to_import_it(own_module, monkeypatch):
    monkeypatch.syspath_prepend(str(own_module))
    importlib.import_module(MODULE)  # registered by its import, as in a user's script
    assert main(["train", f"{TASK}-fno", "--data", "heat.npz", "--out", "runs/m", "--no-progress"]) == 0
    saved = opformer.load("runs/m").save_pretrained("saved")
    assert json.loads((saved / "config.json").read_text())["task_module"] == MODULE
    # a fresh process (nothing of the test's imported): opformer.load, then the command line (opformer eval), say
    # which module to import; the command line evaluates once OPFORMER_TASKS names it, opformer.load once imported
    code = """
        import os, sys
        import numpy as np, opformer
        from opformer.cli import main
        for path in ("runs/m", "saved"):
            try:
                opformer.load(path)
            except opformer.tasks.artifact.LoadError as exc:
                print(exc)
        print("status", main(["eval", "saved", "--data", "heat.npz", "--out", "told"]))
        os.environ["OPFORMER_TASKS"] = "own_heat_mod"
        print("status", main(["eval", "saved", "--data", "heat.npz", "--out", "ran"]))
        import own_heat_mod
        print(opformer.load("saved").predict(np.load("heat.npz")["u0"][:3]).shape)
    """
    out = _fresh(code, own_module)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.strip().splitlines() if not line.startswith("torch threads")]
    for line in lines[:2] + out.stderr.splitlines()[:1]:
        assert f"a model of task '{TASK}', which is not registered in this process: import the module that " \
               f"registers it, {MODULE}, before loading (the command line: OPFORMER_TASKS={MODULE}" in line
    assert lines[2] == "status 2" and "Traceback" not in out.stderr, out.stderr
    assert "test relative L2" in out.stdout and "status 0" in lines and lines[-1] == "(3, 32)", out.stdout


def test_installed_packages_declare_tasks_as_entry_points(own_module, monkeypatch):
    (own_module / "ep_task_mod.py").write_text(TASK_SOURCE.replace('"own-heat"', '"ep-task"'))
    monkeypatch.syspath_prepend(str(own_module))
    real = importlib.metadata.entry_points
    points = [importlib.metadata.EntryPoint(name="ep", value="ep_task_mod", group="opformer.tasks")]

    def entry_points(**kw):
        return points if kw.get("group") == "opformer.tasks" else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(base, "_entry_points_done", False, raising=False)
    assert get_task("ep-task").name == "ep-task"
    # an installed package whose entry point fails: said in one warning, opformer's own tasks and the others work
    points[:] = [importlib.metadata.EntryPoint(name="bad", value="no_such_ep_mod", group="opformer.tasks")]
    monkeypatch.setattr(base, "_entry_points_done", False, raising=False)
    monkeypatch.setattr(base, "_failed_entry_points", [])
    with pytest.warns(OpformerWarning, match=r"^the opformer.tasks entry point bad = no_such_ep_mod failed to "
                                             r"import: ModuleNotFoundError"):
        assert get_task("burgers").name == "burgers"
    assert get_task("ep-task").name == "ep-task"
    with pytest.raises(ConfigError, match=r"^unknown task 'bad-task'.*; the opformer.tasks entry point bad = "
                                          r"no_such_ep_mod failed to import: ModuleNotFoundError"):
        get_task("bad-task")


def test_a_recipe_of_the_users_own_is_generated_in_this_process(own_module, monkeypatch):
    (own_module / "own_recipe_mod.py").write_text(RECIPE_SOURCE)
    monkeypatch.syspath_prepend(str(own_module))
    importlib.import_module("own_recipe_mod")
    monkeypatch.setattr(generate, "default_workers", lambda: 2)  # a machine with cores to spare
    task = get_task("own-heat-recipe")
    files = base.ensure_files(task, DataConfig(), task.options_class())
    with h5py.File(files["train"]) as f:
        assert f["u0"].shape == (9, 16) and np.allclose(f["ut"][:], f["u0"][:] * np.exp(-0.01 * (2 * np.pi) ** 2))
    with pytest.raises(ConfigError, match=r"^--workers 2: the recipe 'own-heat-recipe' of a task module is computed "
                                          r"in this process"):
        base.ensure_files(task, DataConfig(workers=2, recipe={"seed": 1}), task.options_class())


def test_an_unknown_preset_names_the_variable_that_finds_a_users_task(tmp_path, monkeypatch, capsys):
    """`opformer train heat-fno` without the task's module said only "unknown preset or task": a user who wrote a
    task learnt nothing of how the command line finds it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPFORMER_TASKS", raising=False)
    assert main(["train", "heat-fno", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "unknown preset or task 'heat-fno'" in err and "OPFORMER_TASKS=" in err and err.count("\n") == 1, err


def test_train_list_says_a_missing_task_module_or_a_failing_entry_point_in_one_line(tmp_path, monkeypatch, capsys):
    """`opformer train --list` imports the modules of OPFORMER_TASKS: one that is missing ended in a traceback.  A
    failing entry point stopped every command; its warning is one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPFORMER_TASKS", "no_such_task_mod")
    assert main(["train", "--list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opformer: error: OPFORMER_TASKS=no_such_task_mod: no task module") and \
        err.count("\n") == 1, err
    # an installed package's entry point that fails: one warning line, and the command goes on
    monkeypatch.delenv("OPFORMER_TASKS")
    points = [importlib.metadata.EntryPoint(name="bad", value="no_such_ep_mod", group="opformer.tasks")]
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: points if kw.get("group") == "opformer.tasks" else real(**kw))
    monkeypatch.setattr(base, "_entry_points_done", False)
    monkeypatch.setattr(base, "_failed_entry_points", [])
    assert main(["train", "--list"]) == 0
    out, err = capsys.readouterr()
    assert err == ("opformer: warning: the opformer.tasks entry point bad = no_such_ep_mod failed to import: "
                   "ModuleNotFoundError: No module named 'no_such_ep_mod'; its tasks are left out\n")
    assert "burgers" in out


def test_a_task_of_another_class_under_a_known_name_is_replaced_with_a_warning():
    """Two modules registering one task name decided by import order which one trained, without a word."""
    import warnings

    from opformer.tasks import register_task

    builtin = get_task("burgers")

    class Mine(type(builtin)):
        pass

    try:
        with pytest.warns(OpformerWarning, match=r"task 'burgers' of .*Mine replaces the one of "
                                                 r"opformer\.tasks\.burgers\."):
            register_task(Mine())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same class again (a module imported twice): no warning
            register_task(Mine())
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            register_task(builtin)
    assert get_task("burgers") is builtin
