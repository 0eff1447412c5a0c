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

__all__ = ["reference_available", "reference_model_module", "reference_layer_class", "make_reference_layer"]

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
