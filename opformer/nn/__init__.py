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
from .alias_free import AliasFreeActivation2d, fourier_resample2d
from .conditional import ConditionalAffine, ConditionalLayerNorm, LeadTimeMLP
from .cinn import CiNNDownscaler2d, CiNNUpscaler2d, middle_size, resize2d
from .decoders import PointwiseDecoder, SpectralDecoder1d, SpectralDecoder2d
from .encoder import Encoder, EncoderLayer, FeedForward
from .patch import PatchEmbed2d, PatchExpand2d, PatchMerge2d, PatchRecover2d, layer_norm, sincos_encoding_2d
from .spectral import SpectralConv1d, SpectralConv2d
from .window import ContinuousPositionBias, GalerkinBlock2d, WindowAttention2d, WindowBlock2d, window_groups

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
    "PatchEmbed2d",
    "PatchRecover2d",
    "PatchMerge2d",
    "PatchExpand2d",
    "layer_norm",
    "sincos_encoding_2d",
    "WindowAttention2d",
    "WindowBlock2d",
    "GalerkinBlock2d",
    "ContinuousPositionBias",
    "window_groups",
    "AliasFreeActivation2d",
    "fourier_resample2d",
]
