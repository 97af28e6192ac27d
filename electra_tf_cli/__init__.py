"""electra_tf's command-line apps, one module each (`python -m electra_tf_cli.<app>`, or the
console commands `pip install .` puts on the PATH); thin flag layers over the library."""
