"""A fine-tuning run -> one version of a TF Serving model: `<base>/<version>/` (see
`models.serving` for the layout, the task model's `serving_signatures` for what it
answers)."""

from electra_tf.models.finetuned import load_finetuned


def export_classifier(finetuned_dir: str, output: str, trial=None, versions: int = 0,
                      model_name=None, constant_weights: bool = False) -> dict:
    """Exports the kept model of a fine-tuning run (the best trial, or `trial`) as a new
    TF Serving version; see `models.serving.write_serving_version` for `output`,
    `versions`, `constant_weights` and what is returned."""
    return load_finetuned(finetuned_dir, trial).model.export_serving(
        output, model_name, versions, constant_weights)
