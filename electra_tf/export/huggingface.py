"""A fine-tuning run -> Hugging Face's task model of its kind (see
`convert.huggingface_tasks`)."""

from typing import Optional

from electra_tf import files
from electra_tf.convert import huggingface_tasks
from electra_tf.models.finetuned import load_finetuned


def export_huggingface(finetuned_dir: str, output: str, trial: Optional[int] = None) -> dict:
    """Writes the kept model of a fine-tuning run (the best trial, or `trial`) as an HF
    model directory at the new path `output`; returns what `write_finetuned` does."""
    files.check_new_directory(output)  # before the model is loaded
    return huggingface_tasks.write_finetuned(load_finetuned(finetuned_dir, trial), output)
