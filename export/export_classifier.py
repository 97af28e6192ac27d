"""`electra-export-classifier` from a checkout: `python export/export_classifier.py --help`."""

from electra_tf_cli.export_classifier import main

if __name__ == "__main__":
    main()
