"""Load the paper's reference encoder layer (``galerkin-transformer`` 0.2.1 from PyPI) for side-by-side timing.

The reference package imports many things it does not need for one layer (psutil, pandas, torchinfo, plotly, IPython)
and its ``__init__`` pulls all of them in.  :func:`reference_layer_class` imports only ``galerkin_transformer.model``
(and what *it* imports) and puts empty stand-ins in ``sys.modules`` for the missing, unused packages, so nothing has
to be installed that could replace the local torch.  The stand-ins are only added for modules that are absent.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
import warnings

from torch import nn

__all__ = ["reference_available", "reference_model_module", "reference_layer_class", "make_reference_layer",
           "ATTN_DROPOUT_BUG_MODES", "ReferenceNetwork", "train_in_pipeline", "pipeline_parser"]

# modules the reference imports at top level but never uses for SimpleTransformerEncoderLayer
_UNUSED = ("psutil", "pandas", "torchinfo", "seaborn", "IPython")


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__opformer_stub__ = True

    def _missing(*_a, **_k):
        raise RuntimeError(f"{name} is a stand-in installed by opformer.bench.reference; install {name} to use it")

    def __getattr__(attr):  # any public attribute is a function that raises when called
        if attr.startswith("_"):
            raise AttributeError(attr)
        return _missing

    mod.__getattr__ = __getattr__
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)  # importlib.util.find_spec asks stand-ins for it
    if name == "IPython":  # the reference calls get_ipython() at import time; None means "not in a notebook"
        mod.get_ipython = lambda: None
    return mod


def reference_available() -> bool:
    """Whether the reference package is installed (it is not a dependency of opformer)."""
    return importlib.util.find_spec("galerkin_transformer") is not None


def reference_layer_class():
    """``galerkin_transformer.model.SimpleTransformerEncoderLayer``, imported without the package ``__init__``."""
    return reference_model_module().SimpleTransformerEncoderLayer


def reference_model_module():
    """The module ``galerkin_transformer.model`` (its layers and whole models, e.g. ``FourierTransformer2D``),
    imported without the package ``__init__``."""
    if "galerkin_transformer.model" in sys.modules:
        return sys.modules["galerkin_transformer.model"]
    spec = importlib.util.find_spec("galerkin_transformer")
    if spec is None:
        raise ImportError("the reference package is not installed: pip install --no-deps galerkin-transformer==0.2.1")
    try:  # torch._dynamo inspects installed modules when first imported and fails on stand-ins: import it first
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass
    added = [name for name in _UNUSED if importlib.util.find_spec(name) is None and name not in sys.modules]
    for name in added:
        sys.modules[name] = _stub(name)
    if "galerkin_transformer" not in sys.modules:
        # a bare package object: its submodules import normally, its __init__ (which imports everything) is skipped
        pkg = types.ModuleType("galerkin_transformer")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__file__ = spec.origin
        pkg.__spec__ = spec
        sys.modules["galerkin_transformer"] = pkg
    try:
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            return importlib.import_module("galerkin_transformer.model")
    finally:
        # the reference has bound what it imported; other libraries must not find the stand-ins (matplotlib asks
        # sys.modules for IPython when it draws a figure)
        for name in added:
            if getattr(sys.modules.get(name), "__opformer_stub__", False):
                del sys.modules[name]


class _quiet:
    """Silence the reference's import-time prints (e.g. 'Please install Plotly ...')."""

    def __enter__(self):
        import io
        import contextlib

        self._cm = contextlib.redirect_stdout(io.StringIO())
        self._cm.__enter__()

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        return False


def make_reference_layer(
    kind: str, d_model: int = 128, n_heads: int = 4, dim_feedforward: int = 256, pos_dim: int = 1,
    attn_dropout_bug: bool = True,
):
    """A reference encoder layer configured like ours: eq. (4) scheme (attn norm), eta = delta = 0.01, all
    configurable dropouts 0.  The reference forces dropout 0.1 for linear/softmax in its constructor, so the rates
    are reset to 0 afterwards.  ``attn_dropout_bug=False`` removes its hard-wired p=0.5 attention dropout."""
    cls = reference_layer_class()
    layer = cls(
        d_model=d_model, pos_dim=pos_dim, n_head=n_heads, dim_feedforward=dim_feedforward, attention_type=kind,
        layer_norm=False, attn_norm=True, xavier_init=1e-2, diagonal_weight=1e-2, dropout=0.0, ffn_dropout=0.0,
    )
    for m in layer.modules():
        if isinstance(m, __import__("torch").nn.Dropout):
            m.p = 0.0
    if not attn_dropout_bug:
        layer.attn.dropout = None  # the reference applies F.dropout(p=0.5) iff this attribute is not None
    return layer


#: when the reference's hard-wired p = 0.5 attention dropout acts: in training only (evaluation deterministic), always
#: (as the paper's runs, in evaluation too) or never
ATTN_DROPOUT_BUG_MODES = ("train", "always", "off")


class ReferenceNetwork(nn.Module):
    """Base of a reference network put behind opformer's model interface (``self.net``, set by :meth:`_attach`): its
    hard-wired p = 0.5 attention dropout acts as ``bug`` says, one of :data:`ATTN_DROPOUT_BUG_MODES`."""

    def __init__(self, bug: str = "train"):
        if bug not in ATTN_DROPOUT_BUG_MODES:
            raise ValueError(f"--attn-dropout-bug must be train, always or off, got {bug!r}")
        super().__init__()
        self.bug = bug
        self._attn = []  # the reference's attention modules, once attached

    def _attach(self, net) -> None:
        self.net = net
        self._attn = [layer.attn for layer in net.encoder_layers]
        # the reference applies its p = 0.5 dropout iff this attribute is not None
        self._flag = self._attn[0].dropout if self._attn else None
        self.train()

    def train(self, mode: bool = True):
        super().train(mode)
        on = self.bug == "always" or (self.bug == "train" and mode)
        for attn in self._attn:
            attn.dropout = self._flag if on else None
        return self


def train_in_pipeline(task_name: str, build_operator, train_args: list, out, note: str) -> int:
    """``opformer train *train_args [--out out]`` with the task's network replaced by ``build_operator`` (in this
    process only: data, loss, schedule, guard, selection and evaluation stay opformer's); ``note`` goes to
    ``out/REFERENCE_NETWORK.txt`` after a successful run (empty: no file)."""
    from pathlib import Path

    from opformer.cli import main as cli_main
    from opformer.tasks.base import get_task

    task = get_task(task_name)
    task.build_operator = build_operator
    rc = cli_main(["train", *train_args, *(["--out", str(out)] if out else [])])
    if rc == 0 and out and note:
        (Path(out) / "REFERENCE_NETWORK.txt").write_text(note + "\n")
    return rc


def pipeline_parser(prog: str):
    """The options every script that trains a reference network in opformer's pipeline takes (``--attn-dropout-bug``,
    ``--out``); the arguments it does not know go to `opformer train` (``parse_known_args``)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False,
                                     description="the rest of the arguments go to `opformer train`")
    parser.add_argument("--attn-dropout-bug", default="train", choices=ATTN_DROPOUT_BUG_MODES)
    parser.add_argument("--out")
    return parser
