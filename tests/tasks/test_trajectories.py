"""Time-dependent tasks: pairs, splits by trajectory, rollout modes, and a tiny Navier-Stokes run via the CLI."""

from __future__ import annotations

import json
import warnings

import h5py
import numpy as np
import pytest
import torch

import opformer
from opformer.cli import main
from opformer.config import ConfigError, DataConfig
from opformer.tasks import get_task
from opformer.tasks.trajectories import TrajectoryOptions, make_pairs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("k", [1, 4, 10])
def test_all2all_has_k_squared_plus_k_over_two_pairs_per_trajectory(k):
    allowed = np.arange(k + 1)
    assert len(make_pairs(3, allowed, "all2all", False)) == 3 * (k * k + k) // 2
    assert len(make_pairs(3, allowed, "all2all", True)) == 3 * (k + 1) * (k + 2) // 2  # with the i = j pairs
    one = make_pairs(3, allowed, "one-at-a-time", False)
    assert len(one) == 3 * k and set(one[:, 1]) == {0}
    pairs = make_pairs(2, allowed, "all2all", False)
    assert np.all(pairs[:, 1] < pairs[:, 2])


def test_splits_are_by_trajectory_and_pairs_carry_their_lead_time(ns_file):
    task = get_task("ns")
    b = task.load(DataConfig(n_test=4, n_val=3), TrajectoryOptions(), {"train": ns_file, "test": None})
    tr, va, te = (b.datasets[s] for s in ("train", "val", "test"))
    trajectories = {s: {tuple(ds.traj[t].flatten()[:8].tolist()) for t in range(ds.traj.shape[0])}
                    for s, ds in (("train", tr), ("val", va), ("test", te))}
    assert len(trajectories["train"]) == 13 and len(trajectories["val"]) == 3 and len(trajectories["test"]) == 4
    assert not (trajectories["train"] & trajectories["val"]) and not (trajectories["train"] & trajectories["test"])
    assert len(tr) == 13 * 10 and len(va) == 3 * 4 and len(te) == 4 * 4  # all2all for training, (t_0, t_k) else
    times = np.asarray(b.info["times"])
    assert np.allclose(times, [0, 0.5, 1.0, 1.5, 2.0])
    for k in range(len(tr)):
        t, i, j = tr.pairs[k].tolist()
        item = tr[k]
        assert item["lead_time"] == pytest.approx(times[j] - times[i]) and item["lead_time"] > 0
        assert torch.equal(item["input"], tr.traj[t, i]) and torch.equal(item["target"], tr.traj[t, j])
    # an item named in the user's terms (the divergence guard's notes): its trajectory's number in the file
    t, i, j = te.pairs[len(te) - 1].tolist()
    assert te.describe(len(te) - 1) == f"trajectory {16 + t} of {ns_file}, snapshot {i} -> {j}"
    t, i, j = tr.pairs[5].tolist()
    assert tr.describe(5) == f"trajectory {t} of {ns_file}, snapshot {i} -> {j}"


def test_max_time_keeps_later_snapshots_for_testing_only(ns_file):
    b = get_task("ns").load(DataConfig(n_test=4, n_val=3), TrajectoryOptions(max_time=1.0),
                            {"train": ns_file, "test": None})
    lead = b.datasets["train"].tensors("lead_time")
    assert float(lead.max()) == pytest.approx(1.0) and b.info["max_lead"] == pytest.approx(1.0)
    assert float(b.datasets["test"].tensors("lead_time").max()) == pytest.approx(2.0)


def test_tiny_navier_stokes_trains_and_rolls_out_through_the_cli(ns_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "ns-fno", "--data", str(ns_file), "--n-test", "4", "--n-val", "2", "--epochs", "2",
                 "--width", "8", "--out", str(out), "--no-progress"]) == 0
    assert "(opformer.load / opformer rollout)" in capsys.readouterr().out  # predict refuses such a model
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "ns" and np.isfinite(metrics["test_rel_l2"])
    assert metrics["trajectories"] == {"train": 14, "val": 2, "test": 4}  # the splits count trajectories
    ck = out / "checkpoints" / "best.ckpt"
    for mode in ("direct", "autoregressive", "mixed"):
        assert main(["rollout", str(ck), "--data", str(ns_file), "--mode", mode, "--samples", "3",
                     "--times", "0.5,1,2,3.5", "--out", str(tmp_path / mode)]) == 0
        r = json.loads((tmp_path / mode / "rollout.json").read_text())
        assert r["times"] == [0.5, 1, 2, 3.5] and r["rel_l2"][-1] is None  # 3.5: beyond the file, no truth
        assert r["trajectories"] == "the run's test trajectories" and r["n"] == 3  # never a training trajectory
        for name in ("error_vs_time.png", "snapshots.png", "trajectory.gif"):
            assert (tmp_path / mode / "plots" / name).stat().st_size > 0
        # the summary line scores the last time with a truth, and says that one time has none
        printed = capsys.readouterr().out
        assert "at t = 2: " in printed and "; 1 of the 4 times has no truth in the file (predictions only)" in printed
    model = opformer.load(ck)
    u0 = np.asarray(model.task.load(DataConfig(n_test=4, n_val=2), model.options,
                                    {"train": ns_file, "test": None}, splits=("test",)).datasets["test"].traj[:2, 0])
    step = model.artifact["info"]["step"]
    direct = model.rollout(u0, [step], mode="direct")
    ar = model.rollout(u0, [step, 2 * step, 3 * step], mode="autoregressive")
    mixed = model.rollout(u0, [3 * step], mode="mixed")
    # direct with tau = S is one autoregressive step
    np.testing.assert_allclose(direct[:, 0], ar[:, 0], rtol=0, atol=0)
    # two autoregressive steps are one step applied to the first step's output
    again = model.rollout(ar[:, 0], [step], mode="direct")
    np.testing.assert_allclose(ar[:, 1], again[:, 0], rtol=1e-6, atol=1e-6)
    # mixed takes the largest trained jump first: 3S (1.5) is within the training horizon (2.0), so one direct jump
    np.testing.assert_allclose(mixed[:, 0], model.rollout(u0, [3 * step], mode="direct")[:, 0], rtol=1e-6, atol=1e-6)
    # a time's prediction does not depend on the other times asked for: mixed at 3S is still the one jump when S and
    # 2S are asked for too (it was chained from 2S: one more step), and beyond the horizon (4 + 1.5 = 5.5) it is two
    # jumps of the longest lead 2 (4 steps) then one of 1.5 (3 steps); autoregressive at 3S is three steps either way
    lead = model.artifact["info"]["max_lead"]
    assert lead == pytest.approx(4 * step)
    many = model.rollout(u0, [step, 2 * step, 3 * step, 11 * step], mode="mixed")
    np.testing.assert_allclose(many[:, 2], mixed[:, 0], rtol=1e-6, atol=1e-6)
    two = model.rollout(model.rollout(u0, [lead], mode="direct")[:, 0], [lead], mode="direct")[:, 0]
    chain = model.rollout(two, [3 * step], mode="direct")
    np.testing.assert_allclose(many[:, 3], chain[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.rollout(u0, [2 * step, 3 * step], mode="autoregressive")[:, 1], ar[:, 2],
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(opformer.tasks.artifact.ConfigError, match="ascending"):
        model.rollout(u0, [1.0, 0.5])
    # predict with a lead time is the direct rollout's jump; one tau per sample; without one: a clear error
    np.testing.assert_array_equal(model.predict(u0, lead_time=step), direct[:, 0])
    per_sample = model.predict(torch.as_tensor(u0), lead_time=[step, 3 * step])
    assert torch.is_tensor(per_sample)
    np.testing.assert_allclose(per_sample[1].numpy(), model.rollout(u0, [3 * step])[1, 0], rtol=1e-6, atol=1e-6)
    with pytest.raises(opformer.tasks.artifact.ConfigError, match="time-dependent: give lead_time"):
        model.predict(u0)
    with pytest.raises(opformer.tasks.artifact.ConfigError, match="one value or one per sample"):
        model.predict(u0, lead_time=[1.0, 2.0, 3.0])
    for bad in (float("nan"), -0.5, [step, float("inf")]):  # not a lead time: no silent NaN or backward jump
        with pytest.raises(opformer.tasks.artifact.ConfigError, match="lead_time must be finite and >= 0"):
            model.predict(u0, lead_time=bad)
    assert model.predict(u0[:0], lead_time=step).shape == (0, *u0.shape[1:])
    # the rollout command writes the predicted fields, the same as Predictor.rollout on its trajectories
    saved = np.load(tmp_path / "direct" / "predictions.npz")
    np.testing.assert_array_equal(saved["times"], [0.5, 1, 2, 3.5])
    first = saved["trajectories"][0]
    with h5py.File(ns_file, "r") as h5:
        u0_file = np.asarray(h5["w"][first, 0])
    np.testing.assert_allclose(saved["prediction"][0], model.rollout(u0_file[None], [0.5, 1, 2, 3.5])[0],
                               rtol=1e-5, atol=1e-6)
    # `opformer predict` points a time-dependent model at rollout, in one line
    assert main(["predict", str(ck), "--data", str(ns_file), "--out", str(tmp_path / "p.npz")]) == 2
    assert not (tmp_path / "p.npz").exists()


def test_own_trajectories_with_other_keys_a_channel_axis_and_times_as_array_or_attribute(tmp_path):
    """A user's file: trajectories (N, K+1, n, 1) under 'q' and times under 'time' (array in .npz, attribute in .h5)."""
    import h5py

    rng = np.random.default_rng(0)
    q = rng.standard_normal((12, 6, 16, 1))
    times = np.array([0.0, 0.1, 0.3, 0.6, 1.0, 1.5])
    np.savez(tmp_path / "mine.npz", q=q, time=times)
    with h5py.File(tmp_path / "mine.h5", "w") as h5:
        h5["q"] = q[..., 0]
        h5.attrs["time"] = times
    task = get_task("burgers-traj")
    for name in ("mine.npz", "mine.h5"):
        b = task.load(DataConfig(keys=["q"], n_test=2, n_val=2), TrajectoryOptions(time_key="time"),
                      {"train": tmp_path / name, "test": None})
        assert np.allclose(b.info["times"], times) and b.input_grid == (16,)
        assert len(b.datasets["train"]) == 8 * 15 and b.datasets["train"][0]["input"].shape == (16, 1)
    b = task.load(DataConfig(keys=["q"], n_test=2, n_val=2), TrajectoryOptions(dt=0.25),
                  {"train": tmp_path / "mine.h5", "test": None})
    assert np.allclose(b.info["times"], 0.25 * np.arange(6))  # no 't': --dt times the index


def test_history_protocol_steps_one_snapshot_from_the_last_h(ns_file, tmp_path):
    """--history H (the FNO paper's protocol): input = H snapshots as channels, target = the next one; the rollout
    feeds each prediction back into the window."""
    b = get_task("ns").load(DataConfig(n_test=4, n_val=3), TrajectoryOptions(history=2),
                            {"train": ns_file, "test": None})
    tr = b.datasets["train"]
    assert len(tr) == 13 * 3 and "lead_time" not in tr[0]  # i = 1, 2, 3 -> i + 1, for 13 trajectories
    t, i, j = tr.pairs[0].tolist()
    assert (i, j) == (1, 2)
    assert torch.equal(tr[0]["input"], torch.cat((tr.traj[t, 0], tr.traj[t, 1]), dim=-1))
    assert torch.equal(tr[0]["target"], tr.traj[t, 2])
    out = tmp_path / "run"
    assert main(["train", "ns-fno", "--data", str(ns_file), "--history", "2", "--n-test", "4", "--n-val", "2",
                 "--epochs", "1", "--width", "8", "--out", str(out), "--no-progress"]) == 0
    model = opformer.load(out / "checkpoints" / "best.ckpt")
    assert model.artifact["model"]["in_channels"] == 2 and model.artifact["model"]["time_conditioning"] == "none"
    traj = tr.traj[:2, ..., 0].numpy()
    step = model.artifact["info"]["step"]
    two = model.rollout(traj[:, :2], [step, 2 * step], mode="autoregressive")
    first = model.predict(np.concatenate((traj[:, 0, ..., None], traj[:, 1, ..., None]), axis=-1))[..., 0]
    np.testing.assert_allclose(two[:, 0], first, rtol=1e-6, atol=1e-6)
    second = model.predict(np.concatenate((traj[:, 1, ..., None], first[..., None]), axis=-1))[..., 0]
    np.testing.assert_allclose(two[:, 1], second, rtol=1e-5, atol=1e-6)
    with pytest.raises(opformer.tasks.artifact.ConfigError, match="autoregressive"):
        model.rollout(traj[:, :2], [step], mode="direct")
    # unevenly spaced snapshots: one step a snapshot would be labelled with one spacing; refused before training
    uneven = tmp_path / "uneven.npz"
    np.savez(uneven, w=np.random.default_rng(0).standard_normal((12, 5, 8, 8)).astype(np.float32),
             t=np.array([0.0, 0.1, 0.2, 0.5, 0.6]))
    with pytest.raises(opformer.tasks.artifact.ConfigError, match=r"--history 2 steps from snapshot to snapshot, "
                                                                  r"which needs evenly spaced snapshot times; these "
                                                                  r"are spaced 0.1 to 0.3 apart"):
        get_task("ns").load(DataConfig(keys=["w"]), TrajectoryOptions(history=2, time_key="t"),
                            {"train": uneven, "test": None})


def test_time_conditioning_is_noted_only_where_a_given_none_was_changed(ns_file):
    task = get_task("ns")
    b = task.load(DataConfig(n_test=4, n_val=3), TrajectoryOptions(), {"train": ns_file, "test": None})
    for short, model in task.models.items():  # every preset of the task is conditioned already: nothing to say
        cfg, notes = task.fit_model(dict(model), b, set())
        assert cfg["time_conditioning"] in ("norm", "channel") and not any("time_conditioning" in n for n in notes), \
            (short, notes)
    cfg, notes = task.fit_model({"name": "unet", "width": 8}, b, set())  # a model config without the field
    assert cfg["time_conditioning"] == "norm" and not any("time_conditioning" in n for n in notes), notes
    cfg, notes = task.fit_model({"name": "unet", "width": 8, "time_conditioning": "none"}, b, set())  # a preset's none
    assert cfg["time_conditioning"] == "norm" and "time_conditioning none -> norm (the task is time-dependent)" in notes


def test_levels_beyond_the_grid_are_refused_when_set_and_reduced_when_preset(ns_file):
    """Each U-Net/CNO level halves the grid and doubles the width: on 16 x 16 data at most 4 levels make sense, and
    more would only pad the grid while the widths exhaust the memory."""
    task = get_task("ns")
    b = task.load(DataConfig(n_test=4, n_val=3), TrajectoryOptions(), {"train": ns_file, "test": None})
    for name in ("unet", "cno"):
        with pytest.raises(ConfigError, match=r"^--levels 9 is too many for a grid of 16 points a side .*--levels 4 or"):
            task.fit_model({"name": name, "width": 8, "levels": 9}, b, {"levels"})
        cfg, notes = task.fit_model({"name": name, "width": 8, "levels": 5}, b, set())
        assert cfg["levels"] == 4 and "levels 5 -> 4 for a grid of 16 points a side" in notes
        cfg, notes = task.fit_model({"name": name, "width": 8, "levels": 4}, b, {"levels"})
        assert cfg["levels"] == 4 and not any("levels" in n for n in notes)


@pytest.mark.parametrize("history", [1, 2])
def test_rollout_errors_name_the_argument_in_python_and_the_flag_on_the_command_line(history, ns_file, tmp_path,
                                                                                     capsys):
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4, "history": history})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    Predictor(operator, artifact, run.task, run.options).save_pretrained(tmp_path / "m")  # untrained: errors only
    model = opformer.load(tmp_path / "m")
    u0 = np.zeros((1, 16, 16) if history == 1 else (1, history, 16, 16))
    # (Python arguments, command-line flags, the Python error, the command line's)
    if history == 1:
        cases = [({"times": [1.0, 0.5]}, ["--times", "1,0.5"],
                  "times must be finite ascending values > 0 (or a leading 0: u0 itself), got [1.0, 0.5]",
                  "--times must be finite ascending values > 0 (or a leading 0: u0 itself), got [1.0, 0.5]"),
                 ({"times": [0.5], "step": 0}, ["--step", "0"], "step must be a finite number > 0, got 0.0",
                  "--step must be a finite number > 0, got 0.0"),
                 # inf hung the autoregressive loop; nan gave NaN fields and a rollout.json no strict reader takes
                 ({"times": [1.0, np.inf], "mode": "autoregressive"}, ["--times", "1,inf", "--mode", "autoregressive"],
                  "times must be finite ascending values > 0 (or a leading 0: u0 itself), got [1.0, inf]",
                  "--times must be finite ascending values > 0 (or a leading 0: u0 itself), got [1.0, inf]"),
                 ({"times": [np.nan]}, ["--times", "nan"],
                  "times must be finite ascending values > 0 (or a leading 0: u0 itself), got [nan]",
                  "--times must be finite ascending values > 0 (or a leading 0: u0 itself), got [nan]"),
                 ({"times": [1e7], "mode": "autoregressive"}, ["--times", "1e7", "--mode", "autoregressive"],
                  "times up to 1e+07 take about 2e+07 model calls of autoregressive steps (more than 1,000,000); "
                  "give a larger step or mode direct",
                  "--times up to 1e+07 take about 2e+07 model calls of autoregressive steps (more than 1,000,000); "
                  "give a larger step or mode direct"),
                 ({"times": [0.5], "mode": "jump"}, None, "mode must be direct, autoregressive or mixed, got 'jump'",
                  None)]  # argparse checks --mode's choices
    else:  # the command line's --times count from the first snapshot, the argument's from the second
        cases = [({"times": [0.5], "mode": "direct"}, ["--mode", "direct"],
                  "a model with history 2 rolls out one snapshot at a time: use mode='autoregressive'",
                  "a model with --history 2 rolls out one snapshot at a time: use --mode autoregressive"),
                 ({"times": [0.25], "mode": "autoregressive"}, ["--mode", "autoregressive", "--times", "0.75"],
                  "times must be multiples of the step 0.5 for a model with history 2",
                  "--times must be multiples of the step 0.5 for a model with --history 2"),
                 # each call moves one training snapshot: another step relabelled the frames (t = 0.5 was t = 1)
                 ({"times": [0.5], "mode": "autoregressive", "step": 0.25},
                  ["--mode", "autoregressive", "--step", "0.25"],
                  "step of a model with history 2 is its training snapshot spacing 0.5 (each call predicts the next "
                  "snapshot); got 0.25",
                  "--step of a model with history 2 is its training snapshot spacing 0.5 (each call predicts the next "
                  "snapshot); got 0.25"),
                 (None, ["--mode", "autoregressive", "--times", "0.25"], None,  # the user's times, not shifted ones
                  "--times of a model with --history 2 lie after its 2 given snapshots (t > 0.5), got 0.25")]
    for kwargs, flags, python, cli in cases:
        if kwargs is not None:
            with pytest.raises(opformer.tasks.artifact.ConfigError) as caught:
                model.rollout(u0, **kwargs)
            assert str(caught.value) == python
        if flags is not None:
            assert main(["rollout", str(tmp_path / "m"), "--data", str(ns_file), *flags,
                         "--out", str(tmp_path / "r")]) == 2
            assert capsys.readouterr().err == f"opformer: error: {cli}\n"


def test_times_on_the_trajectory_dataset_and_a_missing_time_key_is_one_line(tmp_path, capsys):
    """The times as an HDF5 attribute of the trajectory dataset itself are found; a --time-key that names nothing in
    the file stops training in one line instead of silently taking the snapshots --dt apart."""
    q = np.random.default_rng(1).standard_normal((6, 4, 16))
    times = np.array([0.0, 0.2, 0.4, 0.8])
    with h5py.File(tmp_path / "mine.h5", "w") as h5:
        h5["results/q"] = q
        h5["results/q"].attrs["time"] = times
    b = get_task("burgers-traj").load(DataConfig(keys=["results/q"], n_test=1, n_val=1),
                                      TrajectoryOptions(time_key="time"), {"train": tmp_path / "mine.h5", "test": None})
    assert np.allclose(b.info["times"], times)
    # an attribute of a group holding the dataset, and an array beside it in its group, are found too
    with h5py.File(tmp_path / "grouped.h5", "w") as h5:
        h5["run/sim/q"] = q
        h5["run"].attrs["time"] = times
        h5["other/q"] = q
        h5["other/time"] = 2 * times
    for key, want in (("run/sim/q", times), ("other/q", 2 * times)):
        b = get_task("burgers-traj").load(DataConfig(keys=[key], n_test=1, n_val=1), TrajectoryOptions(time_key="time"),
                                          {"train": tmp_path / "grouped.h5", "test": None})
        assert np.allclose(b.info["times"], want), key
    assert main(["train", "burgers-traj-fno", "--data", str(tmp_path / "mine.h5"), "--keys", "results/q",
                 "--time-key", "tme", "--epochs", "1", "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'tme' (--time-key)" in err[0] and "mine.h5" in err[0]
    assert not (tmp_path / "run").exists()


def test_rollout_covers_every_snapshot_of_a_longer_file_with_or_without_times(tmp_path):
    """A model trained on 6 snapshots 0.1 apart (times under --time-key), rolled out on trajectories of 11
    snapshots: the rollout reaches t = 1.0 (beyond the training horizon), from the file's times or, where the file
    stores none, the training spacing continued."""
    rng = np.random.default_rng(2)
    x = np.arange(16) / 16

    def trajectories(n, k):
        a, p = rng.standard_normal((n, 1, 1)), rng.uniform(0, 2 * np.pi, (n, 1, 1))
        t = 0.1 * np.arange(k + 1)[None, :, None]
        return a * np.sin(2 * np.pi * (x[None, None] - t) + p) * np.exp(-t)

    np.savez(tmp_path / "train.npz", q=trajectories(8, 5), time=0.1 * np.arange(6))
    long = trajectories(3, 10)
    np.savez(tmp_path / "long.npz", q=long, time=0.1 * np.arange(11))
    np.savez(tmp_path / "long_no_times.npz", q=long)
    out = tmp_path / "run"
    assert main(["train", "burgers-traj-fno", "--data", str(tmp_path / "train.npz"), "--keys", "q", "--time-key",
                 "time", "--n-test", "1", "--n-val", "1", "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    np.savez(tmp_path / "long_channel.npz", q=long[..., None], time=0.1 * np.arange(11))
    for name in ("long.npz", "long_no_times.npz", "long_channel.npz"):
        ro = tmp_path / f"ro-{name}"
        assert main(["rollout", str(out), "--data", str(tmp_path / name), "--mode", "autoregressive",
                     "--out", str(ro)]) == 0
        r = json.loads((ro / "rollout.json").read_text())
        np.testing.assert_allclose(r["times"], 0.1 * np.arange(1, 11), rtol=1e-9)
        assert all(e is not None for e in r["rel_l2"]) and r["mean_rel_l2_beyond_horizon"] is not None
    # predictions.npz in the file's layout: with its channel axis where the file has one
    with np.load(tmp_path / "ro-long.npz" / "predictions.npz") as a, \
            np.load(tmp_path / "ro-long_channel.npz" / "predictions.npz") as b:
        assert a["prediction"].shape == (3, 10, 16) and b["prediction"].shape == (3, 10, 16, 1)
        np.testing.assert_array_equal(b["prediction"][..., 0], a["prediction"])


def test_eval_on_a_file_without_times_uses_the_training_spacing(tmp_path, capsys):
    """Trained on snapshots 0.1 apart (times under --time-key), evaluated on the same trajectories stored without
    times: the lead times are the training's (0.1, 0.2, ...), not --dt's default 1, so the error is the same."""
    q = np.random.default_rng(3).standard_normal((6, 4, 16))
    np.savez(tmp_path / "with.npz", q=q, time=0.1 * np.arange(4))
    np.savez(tmp_path / "without.npz", q=q)
    out = tmp_path / "run"
    assert main(["train", "burgers-traj-fno", "--data", str(tmp_path / "with.npz"), "--keys", "q", "--time-key",
                 "time", "--n-test", "1", "--n-val", "1", "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    errors = []
    for name in ("with.npz", "without.npz"):
        assert main(["eval", str(out), "--data", str(tmp_path / name), "--out", str(tmp_path / f"eval-{name}")]) == 0
        metrics = json.loads((tmp_path / f"eval-{name}" / "metrics.json").read_text())
        errors.append(metrics["test_rel_l2"])
        # the samples said as what they are: (t_0, t_k) pairs, 3 of each of the 6 trajectories
        assert metrics["n_trajectories"] == 6 and metrics["n_test"] == 18
        assert f"(18 (t_0, t_k) pairs of 6 trajectories of {tmp_path / name})" in capsys.readouterr().out
    assert errors[0] == pytest.approx(errors[1], rel=1e-6)
    assert opformer.load(out).options.dt == pytest.approx(0.1)


def test_eval_reads_a_file_as_rollout_does_uneven_times_and_its_own_time_key(tmp_path, capsys):
    """Trained on unevenly spaced snapshots (no single --dt): a file without times is evaluated at the training
    times (it was taken 1 apart), a file whose times have another name takes eval --time-key, and the training's
    --max-time does not refuse an evaluation (the test split takes every snapshot)."""
    q = np.random.default_rng(5).standard_normal((6, 4, 16))
    times = np.array([0.0, 0.1, 0.3, 0.4])
    np.savez(tmp_path / "with.npz", q=q, time=times)
    np.savez(tmp_path / "without.npz", q=q)
    np.savez(tmp_path / "renamed.npz", q=q, time_s=times)
    out = tmp_path / "run"
    assert main(["train", "burgers-traj-fno", "--data", str(tmp_path / "with.npz"), "--keys", "q", "--time-key",
                 "time", "--max-time", "0.3", "--n-test", "1", "--n-val", "1", "--epochs", "1", "--out", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    errors = []
    for name, extra in (("with.npz", []), ("without.npz", []), ("renamed.npz", ["--time-key", "time_s"])):
        assert main(["eval", str(out), "--data", str(tmp_path / name), "--out", str(tmp_path / f"e-{name}"),
                     *extra]) == 0
        errors.append(json.loads((tmp_path / f"e-{name}" / "metrics.json").read_text())["test_rel_l2"])
    assert errors[1] == pytest.approx(errors[0], rel=1e-6) and errors[2] == pytest.approx(errors[0], rel=1e-6)
    capsys.readouterr()
    # a --time-key naming nothing in the file, and one given to a model that is not time-dependent
    assert main(["eval", str(out), "--data", str(tmp_path / "renamed.npz"), "--time-key", "tim",
                 "--out", str(tmp_path / "e-bad")]) == 2
    assert "no array or HDF5 attribute 'tim' (--time-key) holds the snapshot times" in capsys.readouterr().err
    assert main(["eval", "burgers-ft", "--data", str(tmp_path / "with.npz"), "--time-key", "time",
                 "--out", str(tmp_path / "e-burgers")]) == 2
    assert "--time-key: the model of task burgers is not time-dependent" in capsys.readouterr().err
    # autoregressive steps on uneven training times: the smallest spacing, said
    with warnings.catch_warnings():  # this module ignores UserWarnings
        warnings.simplefilter("always", opformer.OpformerWarning)
        assert main(["rollout", str(out), "--data", str(tmp_path / "with.npz"), "--mode", "autoregressive",
                     "--out", str(tmp_path / "ro-with")]) == 0
        assert main(["eval", str(out), "--data", str(tmp_path / "without.npz"), "--out", str(tmp_path / "e-again")]) == 0
    err = capsys.readouterr().err
    assert "without.npz stores no snapshot times (no array or attribute 'time', --time-key): its snapshots are " \
           "taken at the training times" in err
    assert ("the training snapshots are unevenly spaced: the autoregressive steps are 0.1, the smallest spacing "
            "(--step sets another)") in err
    # more snapshots than the uneven training times and none stored: the later times are unknown, refused
    np.savez(tmp_path / "longer.npz", q=np.concatenate((q, q[:, :2]), axis=1))
    for command in ("eval", "rollout"):
        assert main([command, str(out), "--data", str(tmp_path / "longer.npz"), "--out",
                     str(tmp_path / f"{command}-longer")]) == 2
        assert ("longer.npz: 6 snapshots and no times ('time', --time-key); the model was trained on 4 unevenly spaced "
                "times, so the later ones are unknown: store the times in the file") in capsys.readouterr().err
    # times out of order: where, not the array's shape
    np.savez(tmp_path / "order.npz", q=q, time=np.array([0.0, 0.3, 0.1, 0.4]))
    assert main(["eval", str(out), "--data", str(tmp_path / "order.npz"), "--out", str(tmp_path / "e-order")]) == 2
    assert "the times 'time' must be increasing, found 0.1 (snapshot 2) after 0.3 (snapshot 1)" in \
        capsys.readouterr().err


def test_rollout_on_another_grid_warns_in_one_line_and_takes_resample(tmp_path, capsys):
    """A grid-bound model (scOT) trained on 16 x 16 rolled out on 32 x 32: the note that it runs on its training
    grid is one 'opformer: warning:' line, and --resample never runs it on the data's grid, as eval and predict."""
    rng = np.random.default_rng(4)

    def field(n):
        x = np.arange(n) / n
        a, p = rng.standard_normal((4, 1, 1, 1)), rng.uniform(0, 2 * np.pi, (4, 1, 1, 1))
        t = 0.1 * np.arange(3)[None, :, None, None]
        return a * np.sin(2 * np.pi * (x[None, None, :, None] + x[None, None, None, :] - t) + p)

    np.savez(tmp_path / "n16.npz", w=field(16))
    np.savez(tmp_path / "n32.npz", w=field(32))
    out = tmp_path / "run"
    assert main(["train", "ns-scot", "--data", str(tmp_path / "n16.npz"), "--dt", "0.1", "--n-test", "1",
                 "--n-val", "1", "--epochs", "1", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    results = {}
    for resample in ("auto", "never"):
        ro = tmp_path / f"ro-{resample}"
        with warnings.catch_warnings():  # this module ignores UserWarnings
            warnings.simplefilter("always", opformer.OpformerWarning)
            assert main(["rollout", str(out), "--data", str(tmp_path / "n32.npz"), "--resample", resample,
                         "--out", str(ro)]) == 0
        err = capsys.readouterr().err
        notes = [line for line in err.splitlines() if "training grid" in line]
        assert notes == ([] if resample == "never" else [notes[0]]) and "Warning:" not in err
        if resample == "auto":
            assert notes[0].startswith("opformer: warning: this model runs on its 16x16 training grid")
        results[resample] = np.load(ro / "predictions.npz")["prediction"]
        assert results[resample].shape == (4, 2, 32, 32)
    assert not np.allclose(results["auto"], results["never"])


def test_a_separate_test_file_is_read_at_its_own_times(tmp_path):
    """--test-data with snapshots 0.2 apart, training data 0.1 apart: the test pairs carry the test file's lead
    times (0.2, 0.4, 0.6), not the training file's."""
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "train.npz", q=rng.standard_normal((5, 4, 16)), time=0.1 * np.arange(4))
    np.savez(tmp_path / "test.npz", q=rng.standard_normal((2, 4, 16)), time=0.2 * np.arange(4))
    b = get_task("burgers-traj").load(DataConfig(keys=["q"], n_val=1), TrajectoryOptions(time_key="time"),
                                      {"train": tmp_path / "train.npz", "test": tmp_path / "test.npz"})
    np.testing.assert_allclose(sorted(set(b.datasets["test"].tensors("lead_time").tolist())), [0.2, 0.4, 0.6],
                               rtol=1e-6)
    np.testing.assert_allclose(b.datasets["val"].tensors("lead_time").tolist(), [0.1, 0.2, 0.3], rtol=1e-6)


def test_a_file_of_single_snapshots_is_one_line_naming_the_key(tmp_path):
    np.savez(tmp_path / "one.npz", q=np.zeros((5, 1, 16)))
    with pytest.raises(opformer.pde.errors.DataError, match=r"one\.npz.*key 'q' holds 1 snapshot per trajectory"):
        get_task("burgers-traj").load(DataConfig(keys=["q"]), TrajectoryOptions(), {"train": tmp_path / "one.npz",
                                                                                   "test": None})


@pytest.mark.parametrize("history", [1, 3])
def test_pair_batches_are_the_stacked_items_on_the_host_and_on_a_device_copy(history):
    """A batch gathered in one indexing per array (the training loaders' path) is what stacking the items gives,
    the window of H snapshots and the lead time included; the device copy (here on the CPU) gathers the same."""
    from opformer.tasks.trajectories import PairDataset

    rng = np.random.default_rng(0)
    traj = rng.normal(size=(3, 6, 4, 4, 2))
    times = np.array([0.0, 0.1, 0.25, 0.3, 0.5, 0.7])
    if history == 1:
        pairs = make_pairs(3, np.arange(6), "all2all", False)
    else:  # the history protocol: targets one step after a full window
        pairs = np.array([(t, i, i + 1) for t in range(3) for i in range(history - 1, 5)], dtype=np.int64)
    ds = PairDataset(traj, times, pairs, rng.normal(size=(4, 4, 2)), history)
    moved = ds.on_device("cpu")
    assert ds.nbytes() == 4 * traj.size + 8 * times.size + 8 * pairs.size + 4 * 32
    for indices in ([0, 1, 2], [len(ds) - 1, 0, 5, 5], [4]):
        want = torch.utils.data.default_collate([ds[k] for k in indices])
        for got in (ds.batch(indices), moved.batch(indices)):
            assert got.keys() == want.keys()
            for key in want:
                assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key


def test_rollout_checks_the_trajectory_layout_and_finds_the_times(ns_file, tmp_path, capsys):
    """A trajectory array of another dimension is refused with its shape (a 1D model took the slice y = 0 of 2D
    fields); the times come from --time-key (also per trajectory, when every row is the same), a file without them
    is noted with the array that may hold them, and --samples beyond the file says that all are used."""
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    Predictor(operator, artifact, run.task, run.options).save_pretrained(tmp_path / "m")
    rng = np.random.default_rng(0)
    time = np.tile(0.1 * np.arange(5), (3, 1))  # (trajectories, times), the same times in every row
    data = tmp_path / "mine.npz"
    np.savez(data, vort=rng.standard_normal((3, 5, 16, 16)), line=rng.standard_normal((3, 5, 16)),
             x=np.linspace(0, 1, 16), time=time)
    m, out = str(tmp_path / "m"), str(tmp_path / "r")
    for key, shape in (("line", "(3, 5, 16)"), ("x", "(16,)")):
        assert main(["rollout", m, "--data", str(data), "--keys", key, "--out", out]) == 2
        assert capsys.readouterr().err == (f"opformer: error: {data}: key {key!r} has shape {shape}; this 2D model "
                                           "rolls out trajectory arrays (samples, times, n, n) or (samples, times, n, "
                                           "n, 1)\n")
    with warnings.catch_warnings():  # this module ignores UserWarnings
        warnings.simplefilter("always", opformer.OpformerWarning)
        assert main(["rollout", m, "--data", str(data), "--keys", "vort", "--out", out, "--samples", "7"]) == 0
    err = capsys.readouterr().err
    assert f"--samples 7: {data} has 3 trajectories to roll out (all trajectories of the file); all are used" in err
    assert "stores no snapshot times" in err and "the file has 'time' of 5 values: --time-key time names them" in err
    trained = json.loads((tmp_path / "r" / "rollout.json").read_text())["times"]
    with warnings.catch_warnings():
        warnings.simplefilter("always", opformer.OpformerWarning)
        assert main(["rollout", m, "--data", str(data), "--keys", "vort", "--out", out, "--time-key", "time"]) == 0
    assert "stores no snapshot times" not in capsys.readouterr().err
    assert json.loads((tmp_path / "r" / "rollout.json").read_text())["times"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert trained != pytest.approx([0.1, 0.2, 0.3, 0.4])  # the training's spacing, without --time-key
    np.savez(data, vort=rng.standard_normal((3, 5, 16, 16)), time=time + np.arange(3)[:, None])  # rows differ
    assert main(["rollout", m, "--data", str(data), "--keys", "vort", "--out", out, "--time-key", "time"]) == 2
    assert "the times 'time' have shape (3, 5): give one time axis shared by every trajectory" in \
        capsys.readouterr().err


def test_rollout_of_tiny_times_no_samples_and_bad_time_arrays(ns_file, tmp_path, capsys):
    """The autoregressive stepping stops at t relative to t (an absolute tolerance of 1e-9 let steps of 1e-13 run
    10^4 times past t = 1e-12); no samples give no predictions in the predictions' shape; a 2-D times argument and a
    --time-key array that is no time axis are refused saying why."""
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    Predictor(operator, artifact, run.task, run.options).save_pretrained(tmp_path / "m")
    model = opformer.load(tmp_path / "m")
    calls = []
    model.operator.register_forward_hook(lambda *args: calls.append(1))
    u0 = np.random.default_rng(0).standard_normal((1, 16, 16))
    model.rollout(u0, [1e-12], mode="autoregressive", step=1e-13)
    assert len(calls) == 10
    assert model.rollout(np.zeros((0, 16, 16)), [0.5, 1.0]).shape == (0, 2, 16, 16)
    assert model.rollout(np.zeros((0, 16, 16)), [0.5], mode="autoregressive").shape == (0, 1, 16, 16)
    with pytest.raises(opformer.tasks.artifact.ConfigError, match=r"times must be one list of times, got an array "
                                                                   r"of shape \(2, 2\)"):
        model.rollout(u0, [[1, 2], [3, 4]])
    with h5py.File(ns_file) as h5:
        w = h5["w"][:3]
    data = tmp_path / "tk.npz"
    np.savez(data, w=w, tnan=np.where(np.arange(w.shape[1]) == 2, np.nan, np.arange(w.shape[1], dtype=float)))
    assert main(["rollout", str(tmp_path / "m"), "--data", str(data), "--keys", "w", "--time-key", "tnan",
                 "--out", str(tmp_path / "r")]) == 2
    assert "key 'tnan' contains NaN or inf" in capsys.readouterr().err  # not "no array ... holds the times"
