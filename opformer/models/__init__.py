"""opformer.models: whole operator learners (Transformer1d/2d, FNO1d/2d, ScOT, ViT, UNet, DeepONet, CNO),
``build_model`` and the paper's presets.

Every model is called as ``model(input, coords)`` or ``model({"input": ..., "coords": ...})``; see ``docs/models.md``.
"""

from .base import EncoderConfig, OperatorModel
from .cno import CNO, CNOConfig
from .deeponet import DeepONet, DeepONetConfig
from .scot import SCOT_SIZES, ScOT, ScOTConfig
from .unet import UNet, UNetConfig
from .vit import ViT, ViTConfig
from .fno import FNO1d, FNO1dConfig, FNO2d, FNO2dConfig
from .presets import MODEL_PRESETS, PAPER_PARAMETERS, model_preset
from .registry import MODELS, build_model, count_parameters, default_coords, example_inputs, model_config
from .transformer import Transformer1d, Transformer1dConfig, Transformer2d, Transformer2dConfig, default_coarse_size

__all__ = [
    "OperatorModel",
    "EncoderConfig",
    "Transformer1d",
    "Transformer1dConfig",
    "Transformer2d",
    "Transformer2dConfig",
    "FNO1d",
    "FNO1dConfig",
    "FNO2d",
    "FNO2dConfig",
    "ScOT",
    "ScOTConfig",
    "SCOT_SIZES",
    "ViT",
    "ViTConfig",
    "UNet",
    "UNetConfig",
    "DeepONet",
    "DeepONetConfig",
    "CNO",
    "CNOConfig",
    "MODELS",
    "build_model",
    "model_config",
    "count_parameters",
    "default_coords",
    "default_coarse_size",
    "example_inputs",
    "MODEL_PRESETS",
    "PAPER_PARAMETERS",
    "model_preset",
]
