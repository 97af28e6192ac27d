"""Tag encodings of word tagging: span tags (IOB1, IOB2, BIOES) and their conversions.

The official recipe trains span tags as BIOES and reports them as IOB2; the tagging task
kind and `ElectraTokenClassifier` both follow it from here.
"""

from electra_tf.finetuning.metrics import iob_spans

SPAN_PREFIXES = ("B-", "I-", "E-", "S-")


def is_span_tagging(tag_sequences) -> bool:
    """Whether the tags mark spans (IOB1, IOB2, BIOES), not one label per token (POS)."""
    return any(tag[:2] in SPAN_PREFIXES for tags in tag_sequences for tag in tags)


def to_bioes(tags) -> list:
    """The BIOES tags of the spans in `tags` (IOB1, IOB2 or BIOES)."""
    out = ["O"] * len(tags)
    for kind, start, end in iob_spans(tags):
        if start == end:
            out[start] = f"S-{kind}"
        else:
            out[start], out[end] = f"B-{kind}", f"E-{kind}"
            out[start + 1:end] = [f"I-{kind}"] * (end - start - 1)
    return out


def trained_on_bioes(labels) -> bool:
    """Whether a model's labels are BIOES span tags (they then include S- tags)."""
    return any(str(label).startswith("S-") for label in labels)


def to_iob2(tag: str) -> str:
    """The IOB2 tag of a BIOES tag (S- starts a span, E- continues one)."""
    return {"S-": "B-", "E-": "I-"}.get(tag[:2], tag[:2]) + tag[2:]


def tag_labels(tag_sequences, bioes: bool = True) -> list:
    """The label set a model trains on for these tags, sorted: with `bioes` and span
    tags, every BIOES tag of their span types (the official recipe), else the tags seen."""
    tag_sequences = list(tag_sequences)
    if bioes and is_span_tagging(tag_sequences):
        kinds = {kind for tags in tag_sequences for kind, _, _ in iob_spans(tags)}
        return sorted({"O"} | {p + kind for kind in kinds for p in SPAN_PREFIXES})
    return sorted({tag for tags in tag_sequences for tag in tags})
