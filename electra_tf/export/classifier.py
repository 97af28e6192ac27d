"""A fine-tuning run -> one version of a TF Serving model: `<base>/<version>/` (see
`serving` for the layout, the task's kind for the signatures)."""

from electra_tf.models.serving import write_serving_version
from electra_tf.finetuning import kinds
from electra_tf.models.finetuned import load_finetuned


def export_classifier(finetuned_dir: str, output: str, trial=None, versions: int = 0,
                      model_name=None) -> dict:
    """Exports the kept model of a fine-tuning run (the best trial, or `trial`) as a new
    TF Serving version; see `serving.write_serving_version` for `output`, `versions` and
    what is returned."""
    run = load_finetuned(finetuned_dir, trial)
    signatures = kinds.get(run.kind).serving_signatures(run, run.tokenizer)
    return write_serving_version(run.model, signatures, run.tokenizer, output, model_name,
                                 versions)
