import hashlib
import os
import sys
from pathlib import Path

import pytest
import yaml

TINY_MODEL = dict(
    name="transformer1d",
    kind="galerkin",
    norm_scheme="galerkin",
    d_model=16,
    num_layers=2,
    n_heads=2,
    dim_feedforward=32,
    activation="relu",
    dropout=0.05,
    norm_eps=1e-5,
    eta=1e-2,
    delta=1e-2,
    decoder_width=8,
    decoder_layers=2,
    modes=8,
    decoder_ffn=8,
    decoder_activation="silu",
)


@pytest.fixture(scope="session")
def burgers_file(tmp_path_factory) -> Path:
    """A tiny R10-recipe Burgers file: 48 samples on 256 points (a few seconds)."""
    from opformer.pde import ensure_dataset

    path = tmp_path_factory.mktemp("data") / "burgers-tiny.h5"
    return ensure_dataset("burgers", path, workers=1, progress=False, n_samples=48, resolution=256, steps=100)


@pytest.fixture()
def tiny_config(tmp_path, burgers_file) -> Path:
    """A run config: 24 train / 8 val / 8 test samples at n = 64, a 2-layer Galerkin model, 3 epochs."""
    cfg = {
        "name": "tiny",
        "task": "burgers",
        "data": {"path": str(burgers_file), "resolution": 64, "train_pool": 32, "n_val": 8, "n_train": 24,
                 "n_test": 8},
        "model": TINY_MODEL,
        "train": {"epochs": 3, "batch_size": 4, "eval_batch_size": 4, "lr": 3e-3, "plot_samples": 2},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli_env() -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable


def tree(root: Path) -> dict:
    """Every file under ``root`` with the hash of its content and its inode (a rewrite changes the inode)."""
    return {str(p.relative_to(root)): (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_ino)
            for p in sorted(root.rglob("*")) if p.is_file()}


def one_line_error(err: str) -> str:
    """The one error line a command printed (warnings aside), with no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("opformer: warning:")]
    assert len(lines) == 1 and lines[0].startswith("opformer: error: "), err
    assert "Traceback" not in err
    return lines[0]


def tensorboard_scalars(logs) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of every scalar in a run's TensorBoard events (``logs``), as TensorBoard shows them: events
    purged by a later file's start step left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logs), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
