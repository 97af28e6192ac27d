"""What the benches read from the repository and beside it: the demo sentiment set and the
reference ELECTRA-Small (`../shared/models/electra-small-ref`, see its README); the
fine-tuning benches' examples and task models made of them."""

import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DISCRIMINATOR = os.path.join(ROOT, "..", "shared", "models", "electra-small-ref",
                                       "discriminator")
MODEL_HELP = "An ELECTRA discriminator in Hugging Face's layout (with vocab.txt)."
# The tagging benches' tags, drawn at random (the work does not depend on them).
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
FINETUNING_TASKS = ("classify", "tag", "qa")


def sentiment(split: str) -> list:
    """The demo sentiment set's rows ({"text", "label", "source"}) of `split` (train, dev)."""
    path = os.path.join(ROOT, "data", "demo", "sentiment", f"{split}.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def finetuning_examples(task: str, count: int):
    """(inputs, targets) of `count` examples of a `FINETUNING_TASKS` task, as our task
    models' `fit` takes them: classify, the demo sentiment texts and labels; tag, their
    words and random `TAGS`; qa, a question of three words read just before a three-word
    answer in 100-200-word passages of the demo corpus. The sentiment texts repeat, in
    order, beyond the set's 2,400."""
    rng = random.Random(0)
    rows = sentiment("train")
    rows = [rows[i % len(rows)] for i in range(count)]
    texts, labels = [r["text"] for r in rows], [int(r["label"]) for r in rows]
    if task == "classify":
        return texts, labels
    if task == "tag":
        words = [t.split() for t in texts]
        return words, [[rng.choice(TAGS) for _ in w] for w in words]
    path = os.path.join(ROOT, "data", "demo", "corpus",
                        "sotu_1961_john_f_kennedy_d.txt")
    with open(path, encoding="utf-8") as f:
        corpus = f.read().split()
    questions, contexts, answers = [], [], []
    for _ in range(count):
        n = rng.randint(100, 200)
        begin = rng.randint(0, len(corpus) - n)
        at = rng.randint(3, n - 3)
        passage = corpus[begin:begin + n]
        questions.append("what about " + " ".join(passage[at - 3:at]) + "?")
        contexts.append(" ".join(passage))
        answers.append((" ".join(passage[at:at + 3]), len(" ".join(passage[:at])) + 1))
    return (questions, contexts), answers


def rows(inputs, part):
    """The examples `part` (a slice) of `finetuning_examples`' inputs, or of each of a
    tuple's (QA's questions and contexts)."""
    return (inputs[0][part], inputs[1][part]) if isinstance(inputs, tuple) else inputs[part]


def task_model(task: str, model_dir: str):
    """Our task model of a `FINETUNING_TASKS` task, from the discriminator in `model_dir`."""
    import electra_tf

    if task == "classify":
        return electra_tf.ElectraTextClassifier.from_pretrained(model_dir, num_classes=2)
    if task == "tag":
        return electra_tf.ElectraTokenClassifier.from_pretrained(model_dir, label_names=TAGS)
    return electra_tf.ElectraQuestionAnswerer.from_pretrained(model_dir)
