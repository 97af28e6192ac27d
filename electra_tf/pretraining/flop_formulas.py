"""FLOPs per token of each part of a pretraining model, as the official
`flops_computation.py` counts them (see `flops` for the conventions).

A matmul of [m, k] x [k, n] is 2mkn FLOPs; element-wise ops count a few FLOPs per
activation (the constants below); embedding lookups count as dense one-hot matmuls unless
`sparse_embedding`. The objectives (`objectives/`) price their heads with these; `flops`
adds up a whole step.
"""

# FLOPs per activation of the small element-wise ops (official constants).
DROPOUT = 4  # random number, compare, mask, rescale
LAYER_NORM = 5
GELU = 8
SOFTMAX = 5


def transformer_block(hidden, intermediate, heads, seq):
    attention = (3 * 2 * hidden * hidden + 3 * hidden  # q, k, v projections and biases
                 + 2 * hidden * seq  # scores
                 + (SOFTMAX + DROPOUT + 1) * seq * heads  # softmax, dropout, scaling
                 + 2 * hidden * seq  # weighted sum of values
                 + 2 * hidden * hidden + hidden  # output projection and bias
                 + (DROPOUT + 1) * hidden + LAYER_NORM)  # the official omits "* hidden" here
    feed_forward = (2 * hidden * intermediate + (GELU + 1) * intermediate
                    + 2 * hidden * intermediate + hidden
                    + (DROPOUT + 1) * hidden + LAYER_NORM * hidden)
    return attention + feed_forward


def embeddings(embedding, hidden, vocab, seq, sparse_embedding):
    flops = 0 if sparse_embedding else 2 * embedding * vocab
    flops += (2 * embedding * (seq + 2)  # position and segment lookups, as official
              + 2 * embedding + (LAYER_NORM + DROPOUT) * embedding)
    if embedding != hidden:
        flops += 2 * hidden * embedding + hidden  # projection to the tower's width
    return flops


def mlm_head(embedding, hidden, vocab):
    return (2 * hidden * embedding + embedding + (GELU + LAYER_NORM) * embedding
            + 2 * embedding * vocab + (SOFTMAX + 2) * vocab)


def rtd_head(hidden):
    return 2 * hidden * hidden + hidden + GELU * hidden + 2 * hidden


def copy_gate(hidden):
    return 2 * hidden + 1 + SOFTMAX  # dense(1), its bias, the sigmoid
