r"""Independent reference: the same RTD training written in PyTorch with Hugging Face's
ELECTRA towers, to tell implementation bugs from what the data and budget give.

  python bench/rtd_reference_torch.py --data 'runs/x/pretrain_data/*.tfrecord*' \
      --vocab_size 6103 --steps 1500

Same shapes as `pretrain.py --preset small --num_layers 4 --batch_size 32 --learning_rate
1e-4 --warmup_steps 1000 --train_steps 3000`, the step of `torch_rtd.py`; torch's AdamW
(with bias correction) stands in for the official optimizer. Prints the discriminator's AUC and the generator's accuracy per 100
steps, to set beside pretrain.py's progress bar. Needs requirements-dev.txt (torch,
transformers).
"""
import glob
import time

import electra_tf  # noqa: F401  (its CPU memory settings)
import numpy as np
import tensorflow as tf
import torch
from absl import app, flags

from electra_tf.config import ElectraConfig
from torch_rtd import RtdStep

FLAGS = flags.FLAGS
flags.DEFINE_string("data", None, "TFRecord shards written by pretrain.py (glob).")
flags.DEFINE_integer("vocab_size", None, "The run's vocab size.")
flags.DEFINE_integer("steps", 1500, "Steps to train.")
flags.DEFINE_integer("num_layers", 4, "Layers of both towers.")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("warmup_steps", 1000, "Linear warmup, multiplied into the decay.")
flags.DEFINE_integer("train_steps", 3000, "Steps of the linear decay to 0.")
MASK_ID, LAST_SPECIAL_ID, SEQ, MAX_PREDICTIONS = 4, 4, 128, 19


def auc(labels, scores):
    """Area under the ROC curve by the rank-sum formula."""
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positive = labels == 1
    n1, n0 = positive.sum(), (~positive).sum()
    return (ranks[positive].sum() - n1 * (n1 + 1) / 2) / max(1, n1 * n0)


def main(argv):
    del argv
    torch.set_num_threads(2)
    step_fn = RtdStep(
        ElectraConfig.preset("small", vocab_size=FLAGS.vocab_size, num_layers=FLAGS.num_layers),
        MASK_ID, LAST_SPECIAL_ID,
        MAX_PREDICTIONS, FLAGS.learning_rate,
        schedule=lambda s: min(1, s / FLAGS.warmup_steps) * max(0.0, 1 - s / FLAGS.train_steps))
    features = {k: tf.io.FixedLenFeature([SEQ], tf.int64)
                for k in ("input_ids", "input_mask", "segment_ids")}
    batches = (tf.data.TFRecordDataset(sorted(glob.glob(FLAGS.data))).repeat()
               .shuffle(5000, seed=0).map(lambda r: tf.io.parse_single_example(r, features))
               .batch(FLAGS.batch_size))

    history, start = [], time.time()
    for step, batch in enumerate(batches.take(FLAGS.steps)):
        ids, mask, segments = (torch.tensor(batch[k].numpy())
                               for k in ("input_ids", "input_mask", "segment_ids"))
        labels, disc_logits, gen_logits, originals = step_fn(ids, mask, segments)
        real = mask.bool().numpy().ravel()
        history.append((labels.numpy().ravel()[real], disc_logits.numpy().ravel()[real],
                        (gen_logits.argmax(-1) == originals).float().mean().item()))
        if (step + 1) % 100 == 0:
            y = np.concatenate([h[0] for h in history])
            s = np.concatenate([h[1] for h in history])
            print(f"step {step + 1}: disc_auc {auc(y, s):.4f}, "
                  f"gen_acc {np.mean([h[2] for h in history]):.3f}, "
                  f"lr {step_fn.schedule.get_last_lr()[0]:.2e}, {time.time() - start:.0f} s",
                  flush=True)
            history = []


if __name__ == "__main__":
    flags.mark_flags_as_required(["data", "vocab_size"])
    app.run(main)
