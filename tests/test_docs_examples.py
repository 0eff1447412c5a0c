"""The examples in README.md and docs/ work as written.

* Every ```python block runs in a fresh namespace and directory. Names its text leaves to the reader (``x``, ``u0``:
  "numpy or torch, (samples, n)") are given Burgers initial conditions, and the run directories it loads are made
  by a one-epoch training on a small file; data sets it generates are made smaller (the only change to its text).
* The recipes printed as dicts are the library's default recipes.
* Every ``opformer train`` command quoted in them (code blocks and inline code) is accepted: the preset exists and
  every flag is a field of its config (checked with ``--help``, which resolves the flags without reading data).
"""

from __future__ import annotations

import ast
import itertools
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _text(path: Path) -> str:
    """The page's text, less the section "Adding a problem" of docs/tasks.md: a user's task module with its shell and
    Python parts, which tests/tasks/test_own_task_doc_example.py runs as a reader would (the module saved as a file,
    its task found through OPFORMER_TASKS)."""
    text = path.read_text()
    if path.name == "tasks.md" and "## Adding a problem" in text:
        start = text.index("## Adding a problem")
        end = text.find("\n## ", start + 1)
        text = text[:start] + "\n" * text.count("\n", start, end) + (text[end:] if end >= 0 else "")
    return text


def _python_blocks() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        text = _text(path)
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{path.relative_to(ROOT)}:{line}", m.group(1)))
    return out


BLOCKS = _python_blocks()
RECIPES = [(name, code) for name, code in BLOCKS if code.lstrip().startswith("{")]
PROGRAMS = [(name, code) for name, code in BLOCKS if not code.lstrip().startswith("{")]


def test_the_documentation_has_examples_to_check():
    assert len(PROGRAMS) >= 7 and len(RECIPES) >= 2  # a changed fence or path must not silently empty this file


@pytest.mark.parametrize("name,code", RECIPES, ids=[n for n, _ in RECIPES])
def test_printed_recipes_are_the_default_recipes(name, code):
    from opformer.pde.generate import BURGERS_R10, DARCY_R421

    shown = ast.literal_eval(code.strip())
    assert shown == {"burgers": BURGERS_R10, "darcy": DARCY_R421}[shown["problem"]], name


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, burgers_file):
    """A run directory made as README's own-data example makes it (`--data mine.npz --keys x,y`), one small epoch."""
    import h5py

    from opformer.cli import main

    root = tmp_path_factory.mktemp("docs-run")
    with h5py.File(burgers_file, "r") as f:
        np.savez(root / "mine.npz", x=f["a"][...], y=f["u"][...])
    rc = main(["train", "burgers-gt", "--data", str(root / "mine.npz"), "--keys", "x,y", "--out", str(root / "run"),
               "--epochs", "1", "--no-progress", "--threads", "1", "--d-model", "16", "--dim-feedforward", "16",
               "--num-layers", "1"])
    assert rc == 0
    return root / "run"


def _small_ensure_dataset(real):
    """``ensure_dataset`` with the sizes cut to what a test can afford: the default r421 Darcy recipe becomes 141
    (the grid the example trains at) and the sample counts just enough for its splits."""

    def ensure_dataset(problem, path, **kw):
        kw.setdefault("resolution", 141)
        kw["n_samples"] = 105 if kw.get("split", "train") == "train" and "n_samples" not in kw else 6
        return real(problem, path, workers=1, progress=False, **kw)

    return ensure_dataset


@pytest.mark.parametrize("name,code", PROGRAMS, ids=[n for n, _ in PROGRAMS])
def test_python_examples_run_as_written(name, code, tmp_path, monkeypatch, trained_run, one_thread):
    import opformer.pde
    from opformer.tasks import unregister_task

    monkeypatch.chdir(tmp_path)
    for run in re.findall(r"runs/[\w.-]+(?=/checkpoints/best\.ckpt)", code):
        shutil.copytree(trained_run, tmp_path / run)
    monkeypatch.setattr(opformer.pde, "ensure_dataset", _small_ensure_dataset(opformer.pde.ensure_dataset))
    u0 = np.sin(2 * np.pi * np.arange(3)[:, None] / 3 + 2 * np.pi * np.arange(128)[None] / 128)
    namespace = {"__name__": "docs_example", "u0": u0, "x": u0}
    try:
        exec(compile(code, name, "exec"), namespace)
    finally:
        for task in re.findall(r'name, dim, default_keys = "([\w-]+)"', code):
            unregister_task(task)
    for var in ("y", "y2", "u1"):  # what the examples compute, where they name it
        if var in namespace and "predict" in code:
            assert np.isfinite(np.asarray(namespace[var])).all()
    if "y2" in namespace:  # "the same predictions" after save_pretrained and load
        np.testing.assert_array_equal(np.asarray(namespace["y"]), np.asarray(namespace["y2"]))


def _train_commands() -> list[str]:
    found = []
    for path in DOCS:
        text = _text(path)
        spans = re.findall(r"(?<!`)`(opformer train [^`]*)`(?!`)", text)
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            block = block.replace("\\\n", " ")
            spans += [line for line in block.splitlines() if line.strip().startswith("opformer train")]
        for span in spans:
            cmd = " ".join(span.split("  #")[0].split(" # ")[0].split())
            cmd = re.sub(r"\s*(>|2>&1|&).*$", "", cmd)  # shell redirections and backgrounding
            if re.search(r"PRESET|FILE|FIELD|\.\.\.", cmd):  # the syntax lines, not commands
                continue
            found.append(cmd)
    return sorted(set(found))


def _expand(cmd: str) -> list[list[str]]:
    """One documented command line as argument lists: placeholders for seeds and models filled in, brace and bar
    alternatives expanded, optional [--flag value] kept."""
    cmd = re.sub(r"\[(--[^\]]+)\]", r"\1", cmd)
    m = re.search(r"(\S*)\{([\w,]+)\}(\S*)", cmd)
    variants = [cmd[:m.start()] + m.group(1) + alt + m.group(3) + cmd[m.end():] for alt in m.group(2).split(",")] \
        if m else [cmd]
    out = []
    for v in variants:
        words = v.split()[2:]
        options = [w.split("|") if "|" in w else [w] for w in words]
        for combo in itertools.product(*options):
            words = [{"S": "2", "M": "gt"}.get(w, w) for w in combo]
            out.append(words)
    return out


TRAIN_COMMANDS = _train_commands()


def test_the_documentation_quotes_train_commands():
    assert len(TRAIN_COMMANDS) >= 30


@pytest.mark.parametrize("cmd", TRAIN_COMMANDS)
def test_documented_train_commands_are_accepted(cmd, capsys):
    from opformer.cli import main

    for words in _expand(cmd):
        assert main(["train", *words, "--help"]) == 0, f"{cmd}: {capsys.readouterr().err.strip()}"
