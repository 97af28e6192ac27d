"""SavedModel export: TF Hub-style encoder + preprocessor, TF Serving classifiers."""
