"""Lists the released models that every command accepts by name.

  electra-presets            (or: python -m electra_tf_cli.presets)

A name works wherever a checkpoint is taken: `electra-finetune --init_checkpoint NAME`,
`electra-export-encoder --checkpoint NAME`, `electra-pretrain --init_checkpoint NAME`,
`electra-convert --to ... --checkpoint NAME`, and every `from_pretrained` in Python
(`electra_tf.ElectraEncoder.from_pretrained(NAME)`, ...). So do `hf:ORG/REPO[@REVISION]`
(a Hugging Face ELECTRA repo), an `https://` archive of a model (`http://` with its hash
pinned: `URL#sha256=<hex>`), and local model directories. First use downloads, verifies, converts and caches the model
under $ELECTRA_TF_HOME (default ~/.cache/electra_tf); later uses work offline.
"""

import sys

from electra_tf.errors import UserError
from electra_tf.zoo import cache, catalog


def _source(entry: catalog.Entry) -> str:
    source = entry.source
    if source.format == "huggingface":
        return f"hf:{source.repo}" + (f" + {source.generator}" if source.generator else "")
    return source.handle or source.url or ""


def table(entries: dict) -> str:
    """The catalog as a Markdown table; models already in the cache are marked."""
    lines = ["| name | size | language | casing | parameters | license | source | cached |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in entries.values():
        parameters = f"{entry.parameters / 1e6:.1f}M" if entry.parameters else "?"
        cached = "yes" if cache.read_entry(entry.name) is not None else ""
        lines.append(f"| {entry.name} | {entry.size} | {entry.language} | {entry.casing} | "
                     f"{parameters} | {entry.license} | {_source(entry)} | {cached} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help", "--helpfull"):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"error: electra-presets takes no arguments (got {' '.join(argv)}); --help "
              "says what it lists.", file=sys.stderr)
        return 2
    try:
        entries = catalog.load()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(entries))
    print(f"\nCache: {cache.home()} (${cache.HOME_ENV}). More entries: a JSON file of the "
          f"same shape in ${catalog.CATALOG_ENV}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
