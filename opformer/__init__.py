"""opformer: attention-based operator learning (Fourier- and Galerkin-type Transformers).

``opformer.load(PATH)`` returns a trained model ready to predict (see :mod:`opformer.tasks.artifact`).
"""

__version__ = "0.2.0"


def load(path, device=None):
    """The trained model at ``path`` (a checkpoint or a ``save_pretrained`` directory), in evaluation mode:
    ``opformer.load(path).predict(inputs)`` maps inputs in the data file's layout to predictions in physical units."""
    from .tasks.artifact import load as _load

    return _load(path, device=device)


__all__ = ["load", "__version__"]
