"""scripts/gpu_tables.py: an unfinished run's resume files go out in pieces small enough to come back from a lease,
and come back together byte for byte on the next machine; a missing piece or an entry outside the run is refused;
the data generation keeps to its CPUs."""

import io
import os
import subprocess
import sys
import tarfile

import pytest

from .conftest import load_script


def _run(root, name="darcy141-gt"):
    run = root / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "config.yaml").write_text("name: darcy-gt\n")
    (run / "checkpoints" / "last.ckpt").write_bytes(bytes(range(256)) * 300)  # 76,800 bytes
    (run / "checkpoints" / "best.ckpt").write_bytes(b"not needed to resume")
    (run / "logs" / "metrics.csv").write_text("epoch,val_rel_l2\n0,0.5\n")
    return run


def test_resume_pieces_round_trip_in_order(tmp_path, monkeypatch):
    mod = load_script("gpu_tables")
    run = _run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    parts = mod.write_resume_parts(run, out, max_bytes=20_000)
    assert [p.name for p in parts] == [f"resume-darcy141-gt.tar.part{i:02d}" for i in range(len(parts))]
    assert len(parts) >= 4 and all(p.stat().st_size <= 20_000 for p in parts)
    assert not list(out.glob(".resume-*"))  # the whole tar is not left behind
    monkeypatch.setattr(mod, "ROOT", tmp_path / "machine2")
    found = mod.read_resume_parts(out)
    assert list(found) == ["darcy141-gt"] and found["darcy141-gt"] == parts
    mod.restore_run("darcy141-gt", found["darcy141-gt"])
    back = tmp_path / "machine2" / "darcy141-gt"
    assert (back / "checkpoints" / "last.ckpt").read_bytes() == (run / "checkpoints" / "last.ckpt").read_bytes()
    assert (back / "config.yaml").read_text() == "name: darcy-gt\n"
    assert (back / "logs" / "metrics.csv").exists() and not (back / "checkpoints" / "best.ckpt").exists()


def test_a_missing_piece_is_refused(tmp_path):
    mod = load_script("gpu_tables")
    out = tmp_path / "out"
    out.mkdir()
    parts = mod.write_resume_parts(_run(tmp_path), out, max_bytes=20_000)
    parts[1].unlink()
    with pytest.raises(SystemExit, match="one is missing"):
        mod.read_resume_parts(out)


def test_an_entry_outside_the_run_is_refused(tmp_path, monkeypatch):
    mod = load_script("gpu_tables")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    part = tmp_path / "resume-x.tar.part00"
    part.write_bytes(buf.getvalue())
    monkeypatch.setattr(mod, "ROOT", tmp_path / "machine2")
    with pytest.raises(SystemExit, match="unexpected entry"):
        mod.restore_run("x", [part])
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "machine2" / "outside.txt").exists()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")
def test_the_data_generation_keeps_to_its_workers_cpus():
    """With more CPUs than workers the data processes get the first ``workers`` of them (the rest are for a
    benchmark meanwhile); with no more, nothing is pinned."""
    gt = load_script("gpu_tables")
    cpus = sorted(os.sched_getaffinity(0))
    assert gt._data_cpus(len(cpus)) is None
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to split")
    hook = gt._data_cpus(1)
    out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         preexec_fn=hook, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(cpus[:1])


def test_start_replaces_the_last_supervisors_finished_state(tmp_path, monkeypatch):
    """A second start on the same machine: until its supervisor writes, the state must not read as finished (a
    follower waiting for "finished" would collect at once), and a supervisor still running is not doubled."""
    import json

    mod = load_script("gpu_tables")
    monkeypatch.setattr(mod, "ROOT", tmp_path / "gpu")
    monkeypatch.setattr(mod, "STATE", tmp_path / "gpu" / "state.json")
    started = []
    monkeypatch.setattr(mod.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    (tmp_path / "gpu").mkdir()
    mod.STATE.write_text(json.dumps({"started": 1.0, "finished": 2.0, "pid": os.getpid(), "runs": {}}))
    mod.main(["start", "--budget-min", "3", "--runs", "darcy211-ft"])
    st = json.loads(mod.STATE.read_text())
    assert "finished" not in st and st["runs"] == {"darcy211-ft": {"state": "starting"}} and len(started) == 1
    # a live supervisor (this process's pid stands in for it) that has not finished: refused, nothing started
    mod.STATE.write_text(json.dumps({"started": 1.0, "pid": os.getpid(), "runs": {}}))
    with pytest.raises(SystemExit, match="still running"):
        mod.main(["start", "--budget-min", "3", "--runs", "darcy211-ft"])
    assert len(started) == 1


def test_collect_and_status_with_nothing_started_say_so_in_one_line(tmp_path, monkeypatch):
    """`collect DIR` in a directory where `start` never ran used to end in a FileNotFoundError traceback."""
    mod = load_script("gpu_tables")
    monkeypatch.setattr(mod, "ROOT", tmp_path / "gpu")
    monkeypatch.setattr(mod, "STATE", tmp_path / "gpu" / "state.json")
    with pytest.raises(SystemExit, match="nothing to collect: .*gpu does not exist"):
        mod.main(["collect", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="nothing started"):
        mod.main(["status"])
    mod.ROOT.mkdir()
    mod.STATE.write_text('{"started": 1')  # cut short
    with pytest.raises(SystemExit, match="not a readable state file"):
        mod.main(["status"])


def test_collect_leaves_no_cut_tarball_when_a_write_fails(tmp_path, monkeypatch):
    """A tarball is written beside its name and renamed once complete; a failed write keeps the one there before."""
    mod = load_script("gpu_tables")
    monkeypatch.setattr(mod, "ROOT", tmp_path / "gpu")
    monkeypatch.setattr(mod, "STATE", tmp_path / "gpu" / "state.json")
    run = tmp_path / "gpu" / "darcy141-gt"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text('{"test_rel_l2": 0.01}')
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu-runs-0.tar.gz").write_bytes(b"the complete tarball of an earlier collect")

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "add", full_disk)
    with pytest.raises(SystemExit, match="writing .*gpu-runs-0.tar.gz failed"):
        mod.main(["collect", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["gpu-runs-0.tar.gz"]
    assert (out / "gpu-runs-0.tar.gz").read_bytes() == b"the complete tarball of an earlier collect"
    monkeypatch.undo()
    monkeypatch.setattr(mod, "ROOT", tmp_path / "gpu")
    monkeypatch.setattr(mod, "STATE", tmp_path / "gpu" / "state.json")
    mod.main(["collect", str(out)])
    with tarfile.open(out / "gpu-runs-0.tar.gz") as tf:
        assert tf.getnames() == ["darcy141-gt/metrics.json"]
