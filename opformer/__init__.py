"""opformer: attention-based operator learning (Fourier- and Galerkin-type Transformers).

``opformer.load(PATH)`` returns a trained model ready to predict (see :mod:`opformer.tasks.artifact`).
"""

__version__ = "0.2.0"


def load(path, device=None, resample="auto"):
    """The trained model at ``path`` (a checkpoint, a ``save_pretrained`` directory, a training's run directory or a
    bundled model's name), in
    evaluation mode: ``opformer.load(path).predict(inputs)`` maps inputs in the data file's layout to predictions in
    physical units, on any grid.  ``resample`` ("auto", "always", "never"): whether inputs on another grid are
    interpolated to the training grid and the predictions back; "auto" does so for models whose layers act on grid
    cells (the 2D transformers, U-Net, scOT, ...)."""
    from .tasks.artifact import load as _load

    return _load(path, device=device, resample=resample)


def __getattr__(name):
    if name == "OpformerWarning":  # warnings.filterwarnings("ignore", category=opformer.OpformerWarning)
        from .config import OpformerWarning

        return OpformerWarning
    raise AttributeError(f"module 'opformer' has no attribute {name!r}")


__all__ = ["load", "OpformerWarning", "__version__"]
