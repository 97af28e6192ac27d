"""Weights in and out: official ELECTRA TF1 checkpoints, Hugging Face, keras-hub.

`electra-convert --help`; from Python, `electra_tf.convert.api`.
"""
