"""`electra-pretrain` from a checkout: `python pretrain.py --help`."""

from electra_tf_cli.pretrain import main

if __name__ == "__main__":
    main()
