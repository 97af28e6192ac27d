"""matplotlib for the benches that plot (compute_matched.py, probe_curve.py).

It is not in the test environment: installed, it is imported by every `import keras`
(`keras.src.visualization`), 0.3-1.0 s more for each of the suite's ~45 processes.
"""

PLOTS_REQUIREMENTS = "requirements-plots.txt"


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a one-line error that names the
    install command. Call it before long work, not only when the plot is due."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"error: this bench plots with matplotlib, which is not installed: "
                         f"pip install -r {PLOTS_REQUIREMENTS}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
