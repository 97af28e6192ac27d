"""TensorFlow Datasets input for fine-tuning (`--tfds_name glue/sst2 --data_dir DIR`).

Reads datasets already prepared in `data_dir` (`download=False`): machines without internet
(ours, many users') copy a prepared TFDS directory over instead of downloading.
"""

import os
from typing import List

from electra_tf.errors import TaskDataError
from electra_tf.finetuning.readers import SequenceExample

# TFDS feature names of the text fields, per GLUE config.
GLUE_FIELDS = {
    "cola": ("sentence", None), "sst2": ("sentence", None),
    "mrpc": ("sentence1", "sentence2"), "qqp": ("question1", "question2"),
    "stsb": ("sentence1", "sentence2"), "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}


def read_tfds(task, name: str, split: str, data_dir: str, text_field="text",
              pair_field="text_pair", label_field="label") -> List[SequenceExample]:
    """Examples of one split of a prepared TFDS dataset, labels as our label strings.

    GLUE's 0/1 tasks keep "0"/"1" (as in GLUE's TSVs); named classes (MNLI, QNLI, RTE)
    use the dataset's class names; unlabeled rows (label -1, GLUE test splits) get None.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise TaskDataError("--tfds_name needs tensorflow-datasets: "
                            "pip install tensorflow-datasets==4.9.10")
    import tensorflow as tf

    def not_prepared(splits_found):
        return TaskDataError(
            f"TFDS dataset {name!r} is not prepared in {data_dir!r} (or has no split "
            f"{split!r}). Prepare it where there is internet (`tfds build {name} --data_dir "
            f"DIR`) and copy DIR here; splits found: {sorted(splits_found)}.")

    try:
        # For a dataset it does not find prepared, TFDS's builder fetches the metadata from
        # Google Cloud Storage (a network request, and an empty temporary directory left
        # behind each time): only the name is checked then.
        if data_dir and not tf.io.gfile.isdir(os.path.join(data_dir, name.split(":")[0])):
            tfds.builder_cls(name.split("/")[0].split(":")[0])
            raise not_prepared([])
        builder = tfds.builder(name, data_dir=data_dir)
    except TaskDataError:
        raise
    except Exception as e:  # unknown dataset or config: TFDS raises several types
        raise TaskDataError(f"--tfds_name {name!r}: {str(e).splitlines()[0]}")
    if split not in builder.info.splits:
        raise not_prepared(builder.info.splits)
    config = name.split("/")[-1]
    text_key, pair_key = GLUE_FIELDS.get(config, (text_field, pair_field))
    label_feature = builder.info.features[label_field]
    names = getattr(label_feature, "names", None)
    examples = []
    for index, row in enumerate(builder.as_dataset(split=split).as_numpy_iterator()):
        raw = row[label_field]
        if task.kind.numeric_labels:
            label = float(raw)
        elif int(raw) < 0:
            label = None
        elif names and task.labels and set(task.labels) == set(names):
            label = names[int(raw)]
        else:
            label = str(int(raw))
        pair = row[pair_key].decode("utf-8") if pair_key and pair_key in row else None
        examples.append(SequenceExample(row[text_key].decode("utf-8"), pair, label,
                                        f"{name}:{split}[{index}]"))
    if not examples:
        raise TaskDataError(f"TFDS {name!r} split {split!r} holds no example.")
    return examples
