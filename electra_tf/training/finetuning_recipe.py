"""The official fine-tuning recipe's optimizer settings (paper, Table 7;
`configure_finetuning.py`).

Free of TensorFlow: `FinetuneConfig` takes its defaults from here, and the commands define
their flags from it without loading TensorFlow (`electra_tf_cli.common.start`).
"""

# Fine-tuning's peak learning rate by the size (preset) of the pretrained model, as in the
# paper's Table 7: 3e-4 for Small, 1e-4 for Base, 5e-5 for Large; 1e-4 for other sizes.
FINETUNING_LEARNING_RATES = {"tiny": 3e-4, "small": 3e-4, "small++": 3e-4, "base": 1e-4,
                             "large": 5e-5}
# The rest of the official fine-tuning recipe's optimizer.
FINETUNING_WARMUP_PROPORTION = 0.1
FINETUNING_WEIGHT_DECAY = 0.01


def finetuning_learning_rate(preset_name) -> float:
    return FINETUNING_LEARNING_RATES.get(preset_name, 1e-4)


def finetuning_layerwise_decay(num_layers: int) -> float:
    """The official layer-wise decay: 0.8, or 0.9 for 24-layer (Large) encoders."""
    return 0.9 if num_layers >= 24 else 0.8
