r"""Independent reference: the same RTD training written in PyTorch with Hugging Face's
ELECTRA towers, to tell implementation bugs from what the data and budget give.

  python bench/rtd_reference_torch.py --data 'runs/x/pretrain_data/*.tfrecord*' \
      --vocab_size 6103 --steps 1500

Same shapes as `pretrain.py --preset small --num_layers 4 --batch_size 32 --learning_rate
1e-4 --warmup_steps 1000 --train_steps 3000` (generator 1/4 wide, whole embedding block
shared, output layer tied, 15% masked of which 85% [MASK], Gumbel samples, loss MLM + 50 x
BCE over real tokens, clipping 1.0); torch's AdamW (with bias correction) stands in for the
official optimizer. Prints the discriminator's AUC and the generator's accuracy per 100
steps, to set beside pretrain.py's progress bar. Needs requirements-dev.txt (torch,
transformers).
"""
import glob
import time

import numpy as np
import tensorflow as tf
import torch
from absl import app, flags
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

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
    torch.manual_seed(0)
    torch.set_num_threads(2)
    common = dict(vocab_size=FLAGS.vocab_size, embedding_size=128,
                  max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
                  layer_norm_eps=1e-12, num_hidden_layers=FLAGS.num_layers)
    disc = ElectraForPreTraining(ElectraConfig(hidden_size=256, num_attention_heads=4,
                                               intermediate_size=1024, **common))
    gen = ElectraForMaskedLM(ElectraConfig(hidden_size=64, num_attention_heads=1,
                                           intermediate_size=256, **common))
    gen.electra.embeddings = disc.electra.embeddings  # the whole embedding block is shared
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    params = list({id(p): p for p in [*disc.parameters(), *gen.parameters()]}.values())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() > 1], "weight_decay": 0.01},
         {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}],
        lr=FLAGS.learning_rate, eps=1e-6)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1, s / FLAGS.warmup_steps) * max(0.0, 1 - s / FLAGS.train_steps))
    features = {k: tf.io.FixedLenFeature([SEQ], tf.int64)
                for k in ("input_ids", "input_mask", "segment_ids")}
    batches = (tf.data.TFRecordDataset(sorted(glob.glob(FLAGS.data))).repeat()
               .shuffle(5000, seed=0).map(lambda r: tf.io.parse_single_example(r, features))
               .batch(FLAGS.batch_size))

    history, start = [], time.time()
    for step, batch in enumerate(batches.take(FLAGS.steps)):
        ids, mask, segments = (torch.tensor(batch[k].numpy())
                               for k in ("input_ids", "input_mask", "segment_ids"))
        candidates = (mask == 1) & (ids > LAST_SPECIAL_ID)
        scores = torch.rand(ids.shape).masked_fill(~candidates, -1)
        count = torch.clamp((candidates.sum(1).float() * 0.15).round().long(), 1, MAX_PREDICTIONS)
        threshold = torch.sort(scores, 1, descending=True).values.gather(1, (count - 1)[:, None])
        picked = (scores >= threshold) & candidates
        masked_ids = ids.clone()
        masked_ids[picked & (torch.rand(ids.shape) < 0.85)] = MASK_ID
        logits = gen(input_ids=masked_ids, attention_mask=mask, token_type_ids=segments).logits
        mlm = torch.nn.functional.cross_entropy(logits[picked], ids[picked])
        with torch.no_grad():
            uniform = torch.rand(logits[picked].shape)
            sample = torch.argmax(logits[picked] - torch.log(-torch.log(uniform + 1e-9) + 1e-9), -1)
        corrupted = ids.clone()
        corrupted[picked] = sample
        labels = (corrupted != ids).float()
        disc_logits = disc(input_ids=corrupted, attention_mask=mask,
                           token_type_ids=segments).logits
        weights = mask.float()
        disc_loss = (torch.nn.functional.binary_cross_entropy_with_logits(
            disc_logits, labels, reduction="none") * weights).sum() / weights.sum()
        optimizer.zero_grad()
        (mlm + 50 * disc_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        real = mask.bool().numpy().ravel()
        history.append((labels.numpy().ravel()[real], disc_logits.detach().numpy().ravel()[real],
                        (logits[picked].argmax(-1) == ids[picked]).float().mean().item()))
        if (step + 1) % 100 == 0:
            y = np.concatenate([h[0] for h in history])
            s = np.concatenate([h[1] for h in history])
            print(f"step {step + 1}: disc_auc {auc(y, s):.4f}, "
                  f"gen_acc {np.mean([h[2] for h in history]):.3f}, "
                  f"lr {schedule.get_last_lr()[0]:.2e}, {time.time() - start:.0f} s", flush=True)
            history = []


if __name__ == "__main__":
    flags.mark_flags_as_required(["data", "vocab_size"])
    app.run(main)
