"""The stand-ins that let the paper's reference layer be imported without its unused dependencies."""

import importlib.util
import sys

from opformer.bench.reference import _stub


def test_a_stand_in_has_a_spec_and_ipython_reports_no_notebook(monkeypatch):
    mod = _stub("IPython")
    assert mod.get_ipython() is None  # the reference calls this at import time and reads its class name
    monkeypatch.setitem(sys.modules, "IPython", mod)
    assert importlib.util.find_spec("IPython") is not None  # raises ValueError for a module without __spec__
    other = _stub("torchinfo")
    try:
        other.summary()
    except RuntimeError as exc:
        assert "torchinfo" in str(exc)
    else:
        raise AssertionError("a stand-in's functions must raise when called")
