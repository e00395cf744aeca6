"""WordPiece tokenizer: from vocab.txt, trained, saved with the data, loaded back."""

from __future__ import annotations

import json
import os

import pytest
from synthetic import SHARED_DATA
from toydata import toy_documents, toy_vocab_tokens, write_toy_vocab

from tokendrop.data import (
    DataError,
    build_tokenizer,
    load_tokenizer,
    read_vocab,
    save_tokenizer,
    train_tokenizer,
)
from tokendrop.data.tokenizer import plain_copy, special_ids

BERT_VOCAB = str(SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt")


def test_vocab_tokenizer_single_and_pair_with_offsets(tmp_path):
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    tok = build_tokenizer(vocab)
    toks = toy_vocab_tokens()
    w1, w2 = toks[-1], toks[-2]
    text = f"{w1.upper()}, {w2}!"
    enc = tok.encode(text)
    assert enc.tokens == ["[CLS]", w1, ",", w2, "!", "[SEP]"]
    assert enc.ids[0] == 2 and enc.ids[-1] == 3  # toy vocab: [CLS]=2, [SEP]=3
    assert [text[a:b] for a, b in enc.offsets[1:-1]] == [w1.upper(), ",", w2, "!"]
    pair = tok.encode(w1, f"{w2} xq")
    assert pair.tokens == ["[CLS]", w1, "[SEP]", w2, "x", "##q", "[SEP]"]
    assert pair.type_ids == [0, 0, 0, 1, 1, 1, 1]
    raw = tok.encode(w1, add_special_tokens=False)
    assert raw.tokens == [w1]
    assert special_ids(tok) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


@pytest.mark.skipif(not os.path.exists(BERT_VOCAB), reason="bert vocab not present")
def test_bert_base_uncased_ids_match_transformers(tmp_path):
    from transformers import BertTokenizer

    tok = build_tokenizer(BERT_VOCAB, lowercase=True)
    ref = BertTokenizer(BERT_VOCAB, do_lower_case=True)
    for text, pair in [
        ("Hello, world! Tokenization isn't trivial: naïve café 東京.", None),
        ("Where is the [MASK]?", "Second segment here."),
    ]:
        ours = tok.encode(text, pair).ids
        theirs = ref(text, pair)["input_ids"]
        assert ours == theirs
    assert tok.encode("Hello, world!").ids == [101, 7592, 1010, 2088, 999, 102]


def test_saved_tokenizer_loads_everywhere(tmp_path):
    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    tok = build_tokenizer(vocab)
    d = tmp_path / "saved"
    save_tokenizer(tok, d)
    assert sorted(os.listdir(d)) == ["tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    assert read_vocab(d / "vocab.txt") == read_vocab(vocab)
    text = "Some words, here."
    want = tok.encode(text).ids
    assert load_tokenizer(d).encode(text).ids == want  # directory -> tokenizer.json
    assert load_tokenizer(d / "tokenizer.json").encode(text).ids == want
    assert load_tokenizer(d / "vocab.txt").encode(text).ids == want  # sibling config says uncased
    only_vocab = tmp_path / "only"
    only_vocab.mkdir()
    (only_vocab / "vocab.txt").write_bytes((d / "vocab.txt").read_bytes())
    assert load_tokenizer(only_vocab).encode(text).ids == want  # guessed: uncased vocab
    # transformers can read the same directory
    from transformers import BertTokenizerFast

    hf = BertTokenizerFast.from_pretrained(str(d))
    assert hf(text)["input_ids"] == want
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no tokenizer.json or vocab.txt"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(DataError, match="no such tokenizer"):
        load_tokenizer(tmp_path / "missing")


def test_cased_vocab(tmp_path):
    tokens = toy_vocab_tokens() + ["Hello", "World"] + [f"Cap{i}" for i in range(20)]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cased = load_tokenizer(tmp_path / "vocab.txt")  # guessed cased: the vocab has upper-case tokens
    assert cased.encode("Hello World", add_special_tokens=False).tokens == ["Hello", "World"]
    uncased = load_tokenizer(tmp_path / "vocab.txt", lowercase=True)
    assert uncased.encode("Hello", add_special_tokens=False).tokens == [
        "h",
        "##e",
        "##l",
        "##l",
        "##o",
    ]


def test_trained_tokenizer(tmp_path):
    docs = toy_documents(200)
    tok = train_tokenizer(docs, vocab_size=150, lowercase=True, min_frequency=1)
    vocab = tok.get_vocab()
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert len(vocab) <= 150
    enc = tok.encode(docs[0].split("\n")[0], "pair")
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and "[UNK]" not in enc.tokens
    save_tokenizer(tok, tmp_path / "t")
    assert load_tokenizer(tmp_path / "t").encode("abc").ids == tok.encode("abc").ids
    assert (
        load_tokenizer(tmp_path / "t" / "vocab.txt").encode("abc def").ids
        == tok.encode("abc def").ids
    )


def test_corpus_text_never_produces_special_ids(tmp_path):
    tok = build_tokenizer(write_toy_vocab(tmp_path / "vocab.txt"))
    text = "a [SEP] b [MASK] c [CLS] [PAD]"
    # user-facing: special, like HF
    assert "[SEP]" in tok.encode(text, add_special_tokens=False).tokens
    plain = plain_copy(tok).encode(text, add_special_tokens=False)
    assert not set(plain.ids) & {0, 2, 3, 4}


@pytest.mark.parametrize(
    "lines, match",
    [
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"], r"lacks the special token\(s\) \[MASK\]"),
        (["[UNK]", "a", "b"], r"lacks the special token\(s\) \[PAD\] \[CLS\] \[SEP\] \[MASK\]"),
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "a"], r"line 7: duplicate token 'a'"),
        (["[PAD]", "", "[UNK]"], r"line 2: blank token"),
        ([], r"empty vocabulary"),
    ],
)
def test_bad_vocab(tmp_path, lines, match):
    p = tmp_path / "vocab.txt"
    p.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    with pytest.raises(DataError, match=match):
        build_tokenizer(p)


def test_bad_vocab_files(tmp_path):
    with pytest.raises(DataError, match="vocabulary file not found"):
        build_tokenizer(tmp_path / "nope.txt")
    p = tmp_path / "v.txt"
    p.write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(DataError, match="invalid UTF-8"):
        build_tokenizer(p)
    j = tmp_path / "tokenizer.json"
    j.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(DataError, match="not a valid tokenizers JSON"):
        load_tokenizer(j)
