"""opformer.nn: the attention layers and building blocks (torch only; import them into your own models)."""

from .attention import (
    KERNELS,
    NORMALIZED,
    SimpleAttention,
    fourier_attention,
    galerkin_attention,
    linear_attention,
    register_kernel,
    softmax_attention,
)
from .conditional import ConditionalAffine, ConditionalLayerNorm, LeadTimeMLP
from .cinn import CiNNDownscaler2d, CiNNUpscaler2d, middle_size, resize2d
from .decoders import PointwiseDecoder, SpectralDecoder1d, SpectralDecoder2d
from .encoder import Encoder, EncoderLayer, FeedForward
from .spectral import SpectralConv1d, SpectralConv2d

__all__ = [
    "KERNELS",
    "NORMALIZED",
    "SimpleAttention",
    "fourier_attention",
    "galerkin_attention",
    "linear_attention",
    "softmax_attention",
    "register_kernel",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "SpectralConv1d",
    "SpectralConv2d",
    "CiNNDownscaler2d",
    "CiNNUpscaler2d",
    "middle_size",
    "resize2d",
    "SpectralDecoder1d",
    "SpectralDecoder2d",
    "PointwiseDecoder",
    "ConditionalLayerNorm",
    "ConditionalAffine",
    "LeadTimeMLP",
]
