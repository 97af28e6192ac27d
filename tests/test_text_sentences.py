from electra_tf.text.sentences import split_sentences


def test_splits_on_terminal_punctuation():
    assert split_sentences("It rained. Then it stopped! Did it? Yes.") == [
        "It rained.", "Then it stopped!", "Did it?", "Yes."]


def test_keeps_abbreviations_initials_and_numbers_together():
    text = "Mr. Smith met Dr. Jones in the U.S. Senate. J. Doe paid 3.5 dollars."
    assert split_sentences(text) == [
        "Mr. Smith met Dr. Jones in the U.S. Senate.", "J. Doe paid 3.5 dollars."]


def test_closing_quotes_stay_with_their_sentence():
    assert split_sentences('He said "Go." She went.') == ['He said "Go."', "She went."]


def test_lowercase_continuation_is_not_a_boundary():
    assert split_sentences("Wait... and see.") == ["Wait... and see."]


def test_cjk_full_stops_split_without_spaces():
    assert split_sentences("今日は晴れ。明日は雨！") == ["今日は晴れ。", "明日は雨！"]


def test_blank_text_has_no_sentence():
    assert split_sentences("   ") == []
