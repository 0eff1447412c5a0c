"""The Python examples of docs/models.md run as written: each block alone, in a fresh interpreter started in an
empty folder, with nothing given to it.  What they compute is checked too: the call example's output has the shape
of the page's shape table, and every model the config examples build has the parameter count of the paper's
budgets (``PAPER_PARAMETERS``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from opformer.models import PAPER_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "models.md").read_text()
BLOCKS = [(f"docs/models.md:{DOC.count(chr(10), 0, m.start()) + 1}", m.group(1))
          for m in re.finditer(r"```python\n(.*?)```", DOC, re.S)]

#: run before a block: remember every model build_model returns
PROLOGUE = """\
import opformer.models as _models
_built = []
_build = _models.build_model
def _recording(cfg):
    model = _build(cfg)
    _built.append(model)
    return model
_models.build_model = _recording
"""

#: run after it: what it built and the shapes of the tensors it left
EPILOGUE = """
import json as _json, torch as _torch
from opformer.models import count_parameters as _count
print("RESULT " + _json.dumps({
    "built": [[m.name, _count(m), m.config.out_channels] for m in _built],
    "shapes": {k: list(v.shape) for k, v in list(globals().items()) if isinstance(v, _torch.Tensor)},
}))
"""


def test_the_page_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("where,code", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_the_examples_run_as_written(where, code, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    script = tmp_path / "example.py"
    script.write_text(PROLOGUE + code + EPILOGUE)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["built"], f"{where} builds no model"
    budgets = {n for pair in PAPER_PARAMETERS.values() for n in pair}
    if "y" in result["shapes"]:  # model(x, coords): the shape table's (B, n, C_out) for the input's (B, n, C_in)
        x, y = result["shapes"]["x"], result["shapes"]["y"]
        assert y == x[:-1] + [result["built"][0][2]], where
        assert result["shapes"]["coords"] == x[:-1] + [len(x) - 2]
    else:  # the configs of the paper's models
        assert all(count in budgets for _, count, _ in result["built"]), (where, result["built"])
