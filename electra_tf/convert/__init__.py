"""Weights in and out: official ELECTRA TF1 checkpoints, Hugging Face, keras-hub.

`python -m electra_tf.convert --help`; from Python, `electra_tf.convert.api`.
"""
