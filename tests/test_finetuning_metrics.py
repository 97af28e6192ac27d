import numpy as np
import pytest

from electra_tf.finetuning import metrics


def test_classification_metrics_on_hand_computed_cases():
    gold, predicted = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert metrics.accuracy(gold, predicted) == 0.6
    assert metrics.binary_f1(gold, predicted) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # tp=2 tn=1 fp=1 fn=1: (2 - 1) / sqrt(3 * 3 * 2 * 2)
    assert metrics.matthews_corrcoef(gold, predicted) == pytest.approx(1 / 6)


def test_correlations():
    assert metrics.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert metrics.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)
    # ties get average ranks: [1, 2.5, 2.5, 4] vs [1, 2, 3, 4]
    expected = np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1]
    assert metrics.spearman([1, 2, 2, 3], [5, 6, 7, 8]) == pytest.approx(expected)


def test_iob_spans_follow_conlleval():
    assert metrics.iob_spans(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    # IOB1: I- after O starts a span; a type change ends one.
    assert metrics.iob_spans(["I-ORG", "I-ORG", "I-LOC"]) == {("ORG", 0, 1), ("LOC", 2, 2)}


def test_span_f1_counts_exact_spans_only():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    predicted = [["B-PER", "O", "O", "B-LOC"]]  # PER span cut short: wrong
    scores = metrics.span_f1(gold, predicted)
    assert scores["precision"] == 0.5 and scores["recall"] == 0.5 and scores["f1"] == 0.5


def test_squad_normalisation_and_scores():
    assert metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert metrics.exact_match("the Eiffel Tower", "Eiffel Tower.") == 1.0
    assert metrics.token_f1("Eiffel Tower in Paris", "the Eiffel Tower") == pytest.approx(
        2 * (2 / 4) * (2 / 2) / (2 / 4 + 2 / 2))
    scores = metrics.squad_scores({"a": ["Paris"], "b": []}, {"a": "paris", "b": ""})
    assert scores["exact"] == 100.0 and scores["HasAns_exact"] == 100.0
    assert scores["NoAns_f1"] == 100.0
    assert metrics.squad_scores({"b": []}, {"b": "something"})["exact"] == 0.0
