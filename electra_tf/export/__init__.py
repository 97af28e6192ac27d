"""SavedModel export: TF Hub-style encoder + preprocessor (and, next, serving classifiers)."""
