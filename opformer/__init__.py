"""opformer: attention-based operator learning (Fourier- and Galerkin-type Transformers)."""

__version__ = "0.1.0"
