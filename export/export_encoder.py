"""`electra-export-encoder` from a checkout: `python export/export_encoder.py --help`."""

from electra_tf_cli.export_encoder import main

if __name__ == "__main__":
    main()
