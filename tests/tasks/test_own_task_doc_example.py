"""The example of ``docs/tasks.md`` ("Adding a problem"), taken from the page and run as a reader would: the module
saved as a file of its own, the shell commands, then the Python part in a fresh process (at tiny sizes)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import opformer.pde.generate as generate
import opformer.tasks.base as base
from opformer.cli import main
from opformer.pde.storage import PROBLEM_KEYS
from opformer.tasks import unregister_task

DOC = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def example_blocks() -> list[tuple[str, str]]:
    """The (language, text) code blocks of the section "Adding a problem"."""
    text = DOC.read_text()
    start = text.index("## Adding a problem")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S)


@pytest.fixture
def reader(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "cache"))
    monkeypatch.delenv("OPFORMER_TASKS", raising=False)
    monkeypatch.setattr(base, "_imported", set(), raising=False)
    yield tmp_path
    unregister_task("heat")
    generate.RECIPES.pop("heat", None)
    PROBLEM_KEYS.pop("heat", None)
    sys.modules.pop("heat_task", None)


def test_the_documented_task_module_trains_evaluates_loads_and_saves(reader, monkeypatch):
    blocks = example_blocks()
    assert [lang for lang, _ in blocks] == ["python", "bash", "python"]
    module, commands, usage = (text for _, text in blocks)
    (reader / "heat_task.py").write_text(module)
    ran = []
    for line in commands.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            monkeypatch.setenv(name, value)
            continue
        assert words[0] == "opformer", line
        args = words[1:]
        if args[0] == "train":  # tiny: one epoch on few samples (an odd count)
            args += ["--epochs", "1", "--no-progress"]
            if "--recipe" not in args:
                args += ["--recipe", "n_samples=23"]
        assert main(args) == 0, line
        ran.append(args[0])
    assert ran.count("train") >= 2 and "eval" in ran
    tiny = re.sub(r'\{"epochs": \d+\}', '{"epochs": 1}', usage)
    assert tiny != usage
    env = {k: v for k, v in os.environ.items() if k != "OPFORMER_TASKS"}  # a process told nothing of the task
    out = subprocess.run([sys.executable, "-c", tiny], cwd=reader, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert "relative L2 against the exact solution" in lines[-2]
    assert float(lines[-1]) == 0.0
    assert (reader / "heat-model" / "config.json").is_file()
