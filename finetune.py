"""`electra-finetune` from a checkout: `python finetune.py --help`."""

from electra_tf_cli.finetune import main

if __name__ == "__main__":
    main()
