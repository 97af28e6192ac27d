"""Builds data/demo/ from the project's shared real-text data (run once; outputs are committed).

Pretraining text uses the official format: one sentence or line per line, a blank line between
documents. State of the Union speeches (one speech per line upstream) are kept as one document
each; Moby-Dick's hard-wrapped paragraphs are re-joined into one line each, with a blank line
between chapters, so that each chapter is one document. Sentence splitting happens later, in
the data builder, exactly as for a user's own corpus.
"""

import json
import pathlib
import random
import re
import shutil
import sys

SHARED = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "../../../shared/data")
HERE = pathlib.Path(__file__).parent
FIRST_SOTU_YEAR = 1960


def moby_dick_chapters(text):
    chapters = re.split(r"\n(?=CHAPTER \d+\.)", text)
    for chapter in chapters:
        paragraphs = [" ".join(p.split()) for p in chapter.split("\n\n")]
        yield [p for p in paragraphs if p]


def write_split(items, directory, extension, render, dev_fraction=0.2, seed=0):
    """A fixed shuffle, then the last `dev_fraction` of it becomes dev."""
    items = list(items)
    random.Random(seed).shuffle(items)
    cut = int(len(items) * (1 - dev_fraction))
    for name, part in (("train", items[:cut]), ("dev", items[cut:])):
        with open(directory / f"{name}.{extension}", "w", encoding="utf-8") as f:
            f.writelines(render(item) for item in part)


def main():
    corpus = HERE / "corpus"
    corpus.mkdir(exist_ok=True)
    for path in sorted((SHARED / "sotu").glob("*.txt")):
        if int(path.name.split("_")[0]) >= FIRST_SOTU_YEAR:
            shutil.copy(path, corpus / f"sotu_{path.name}")
    moby = (SHARED / "moby-dick.txt").read_text(encoding="utf-8")
    with open(corpus / "moby_dick.txt", "w", encoding="utf-8") as f:
        for paragraphs in moby_dick_chapters(moby):
            f.write("\n".join(paragraphs) + "\n\n")
    sentiment = HERE / "sentiment"
    sentiment.mkdir(exist_ok=True)
    rows = []
    for path in sorted((SHARED / "uci-sentiment").glob("*.jsonl")):
        shutil.copy(path, sentiment / path.name)
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            row = json.loads(line)
            rows.append({"text": row["text"], "label": str(row["label"]),
                         "source": path.stem})
    write_split(rows, sentiment, "jsonl", lambda r: json.dumps(r, ensure_ascii=False) + "\n")
    (HERE / "korean").mkdir(exist_ok=True)
    shutil.copy(SHARED / "korean" / "constitution.txt", HERE / "korean" / "constitution.txt")
    ner = HERE / "japanese_ner"
    ner.mkdir(exist_ok=True)
    shutil.copy(SHARED / "japanese-ner" / "iob_sents.txt", ner / "iob_sents.txt")
    sentences = (ner / "iob_sents.txt").read_text(encoding="utf-8").strip().split("\n\n")
    write_split(sentences, ner, "conll", lambda s: s.strip() + "\n\n")
    print(json.dumps({p.name: p.stat().st_size for p in sorted(corpus.iterdir())})[:200], "...")


if __name__ == "__main__":
    main()
