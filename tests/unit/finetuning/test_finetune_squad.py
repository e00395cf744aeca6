"""SQuAD: reading, windows (doc stride), offsets back to the exact context text, null answers."""

import json

import numpy as np
import pytest
from toydata import write_vocab

from tokendrop.finetuning import FinetuneError
from tokendrop.finetuning.common import load_finetune_tokenizer
from tokendrop.finetuning.tasks.squad import (
    SquadExample,
    _is_max_context,
    _windows,
    build_features,
    postprocess,
    read_squad,
    squad_metrics,
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_finetune_tokenizer(write_vocab(tmp_path_factory.mktemp("vocab")))


CONTEXT = (
    "The museum opened in 1901. " * 6
    + "Its architect was Zürich-born Ana Café, who also drew the plans. "
    + "Visitors came from far away. " * 6
)
ANSWER = "Zürich-born Ana Café"


def _example(qid="q1", answers=(ANSWER,), impossible=False):
    starts = [CONTEXT.index(a) for a in answers]
    return SquadExample(qid, "Who was the architect?", CONTEXT, list(answers), starts, impossible)


def _one_hot_logits(feats, fi, si, ej, n=None):
    starts = [np.full(len(f.input_ids), -10.0) for f in feats]
    ends = [np.full(len(f.input_ids), -10.0) for f in feats]
    for x in starts + ends:
        x[0] = 0.0  # null score 0 in every window
    starts[fi][si] = 10.0
    ends[fi][ej] = 10.0
    return starts, ends


def test_windows_cover_the_context_with_stride():
    assert _windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert _windows(3, 4, 2) == [(0, 3)]
    assert _windows(0, 4, 2) == [(0, 0)]
    spans = [(0, 10), (5, 10)]
    # more context on both sides
    assert _is_max_context(spans, 1, 8) and not _is_max_context(spans, 0, 8)
    # only in the first window
    assert _is_max_context(spans, 0, 2) and not _is_max_context(spans, 1, 2)


def test_training_labels_and_exact_substrings_across_windows(tok):
    ex = _example()
    feats = build_features([ex], tok, max_seq_len=48, doc_stride=16, max_query_len=8, training=True)
    assert len(feats) > 3  # the context needs several windows
    labelled = [f for f in feats if f.start_position > 0]
    assert labelled, "the answer must be fully inside at least one window"
    for f in feats:
        assert len(f.input_ids) <= 48 and f.input_ids[0] == tok.token_to_id("[CLS]")
        assert f.input_ids[-1] == tok.token_to_id("[SEP]")
        ctx_pos = [i for i, o in enumerate(f.offsets) if o is not None]
        assert all(f.token_type_ids[i] == 1 for i in ctx_pos)
        # every context token maps back into the original (cased, accented) context
        for i in ctx_pos:
            a, b = f.offsets[i]
            assert 0 <= a < b <= len(CONTEXT)
        if f.start_position:
            a, b = f.offsets[f.start_position][0], f.offsets[f.end_position][1]
            assert CONTEXT[a:b] == ANSWER
        else:
            assert f.end_position == 0
    # windows overlap by (window - stride) tokens: consecutive windows share context offsets
    offs = [[o for o in f.offsets if o is not None] for f in feats]
    for w0, w1 in zip(offs, offs[1:]):
        assert w0[16:] == w1[: len(w0) - 16]


def test_postprocess_returns_the_exact_context_text_in_any_window(tok):
    ex = _example()
    feats = build_features([ex], tok, max_seq_len=48, doc_stride=16, max_query_len=8)
    hits = 0
    for fi, f in enumerate(feats):
        ctx_pos = [i for i, o in enumerate(f.offsets) if o is not None]
        # the answer's tokens in this window, if the whole answer is inside it
        a0, a1 = CONTEXT.index(ANSWER), CONTEXT.index(ANSWER) + len(ANSWER)
        inside = [i for i in ctx_pos if f.offsets[i][1] > a0 and f.offsets[i][0] < a1]
        if not inside or f.offsets[inside[0]][0] != a0 or f.offsets[inside[-1]][1] != a1:
            continue
        if not f.max_context[inside[0]]:
            continue
        s, e = _one_hot_logits(feats, fi, inside[0], inside[-1])
        p = postprocess([ex], feats, s, e, n_best=20, max_answer_len=30)["q1"]
        assert p.text == ANSWER  # original casing, accents and hyphen: a substring of the context
        assert p.nbest[0]["start"] == a0 and p.nbest[0]["end"] == a1
        assert p.na_score == pytest.approx(0.0 - 20.0)
        hits += 1
    assert hits >= 1


def test_max_context_rule_and_constraints(tok):
    ex = _example()
    feats = build_features([ex], tok, max_seq_len=48, doc_stride=16, max_query_len=8)
    # a token present in two windows: the candidate only counts where it has its maximal context
    f0, f1 = feats[0], feats[1]
    shared = [i for i, o in enumerate(f0.offsets) if o is not None and o in f1.offsets]
    pos0 = shared[-1]  # near the end of window 0, near the start of window 1
    assert not f0.max_context[pos0]
    s, e = _one_hot_logits(feats, 0, pos0, pos0)
    p = postprocess([ex], feats, s, e)["q1"]
    assert p.nbest == [] or p.nbest[0]["start"] != f0.offsets[pos0][0] or p.nbest[0]["score"] < 20.0
    # end before start, or longer than max_answer_len, never wins
    ctx = [i for i, o in enumerate(f0.offsets) if o is not None and f0.max_context[i]]
    s, e = _one_hot_logits(feats, 0, ctx[5], ctx[2])
    assert postprocess([ex], feats, s, e)["q1"].score < 20.0
    s, e = _one_hot_logits(feats, 0, ctx[0], ctx[10])
    assert postprocess([ex], feats, s, e, max_answer_len=5)["q1"].score < 20.0
    assert postprocess([ex], feats, s, e, max_answer_len=11)["q1"].score == pytest.approx(20.0)


def test_unanswerable_questions_and_threshold(tok):
    ans = _example("has")
    imp = SquadExample("none", "Who painted the ceiling?", CONTEXT, [], [], True)
    feats = build_features(
        [ans, imp], tok, max_seq_len=128, doc_stride=32, max_query_len=8, training=True
    )
    assert all(f.start_position == 0 and f.end_position == 0 for f in feats if f.example_index == 1)
    feats = build_features([ans, imp], tok, max_seq_len=128, doc_stride=32, max_query_len=8)
    starts = [np.full(len(f.input_ids), -5.0) for f in feats]
    ends = [np.full(len(f.input_ids), -5.0) for f in feats]
    for x in starts + ends:
        x[0] = 0.0
    a0 = CONTEXT.index(ANSWER)
    for fi, f in enumerate(feats):
        if f.example_index == 0:
            for i, o in enumerate(f.offsets):
                if o is not None and o[0] == a0 and f.max_context[i]:
                    starts[fi][i] = 5.0
                if o is not None and o[1] == a0 + len(ANSWER):
                    ends[fi][i] = 5.0
        else:
            starts[fi][0] = ends[fi][0] = 4.0  # [CLS]: the model believes "no answer"
    preds = postprocess([ans, imp], feats, starts, ends)
    assert preds["has"].text == ANSWER and preds["has"].na_score < 0
    assert preds["none"].na_score > 0
    m, final = squad_metrics([ans, imp], preds, version=2)
    assert final == {"has": ANSWER, "none": ""}
    assert m["f1"] == 100.0 and m["exact"] == 100.0 and m["NoAns_total"] == 1
    assert preds["has"].na_score <= m["null_threshold"] < preds["none"].na_score
    m1, final1 = squad_metrics([ans], {"has": preds["has"]}, version=1)
    assert m1["exact"] == 100.0 and final1 == {"has": ANSWER}


def _squad_file(tmp_path, qas, context="Paris is the capital of France.", version="1.1"):
    p = tmp_path / "f.json"
    p.write_text(
        json.dumps(
            {
                "version": version,
                "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
            }
        )
    )
    return p


def test_read_squad_and_answer_start_mismatch(tmp_path):
    p = _squad_file(
        tmp_path,
        [{"id": "a", "question": "capital?", "answers": [{"text": "France", "answer_start": 3}]}],
    )
    with pytest.raises(
        FinetuneError,
        match=r"qas\[0\]\.answers\[0\] \(id 'a'\): answer_start 3 does not point at the "
        r"answer 'France'.*occurs at 24",
    ):
        # never silently moved to another occurrence (docs/reliability.md, category "bad input")
        read_squad(p)
    p = _squad_file(
        tmp_path,
        [
            {
                "id": "a",
                "question": "q",
                "answers": [],
                "is_impossible": True,
                "plausible_answers": [{"text": "Paris", "answer_start": 0}],
            }
        ],
        version="v2.0",
    )
    ex, v = read_squad(p)
    assert v == 2 and ex[0].is_impossible and ex[0].answers == []
    with pytest.raises(FinetuneError, match="unanswerable questions"):
        read_squad(p, version=1)


@pytest.mark.parametrize(
    "qas, msg",
    [
        (
            [{"question": "q", "answers": []}],
            "data[0].paragraphs[0].qas[0]: missing or non-string 'id'",
        ),
        (
            [{"id": "a", "question": "q", "answers": [{"text": "Rome", "answer_start": 0}]}],
            "does not occur in the context",
        ),
        (
            [{"id": "a", "question": "q", "answers": [{"text": "Paris"}]}],
            "qas[0].answers[0]: expected {'text'",
        ),
        ([{"id": "a", "question": "q", "answers": []}], "no answers and not marked is_impossible"),
        (
            [{"id": "a", "question": "q", "answers": [{"text": "Paris", "answer_start": 0}]}] * 2,
            "duplicate question id 'a'",
        ),
    ],
)
def test_malformed_squad(tmp_path, qas, msg):
    p = _squad_file(tmp_path, qas)
    with pytest.raises(FinetuneError) as e:
        read_squad(p)
    assert str(p) in str(e.value) and msg in str(e.value)


def test_squad_not_json_or_wrong_shape(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"data": [\n  {"title": 1,}\n]}')
    with pytest.raises(FinetuneError, match=r"x.json: invalid JSON \(line 2 "):
        read_squad(p)
    p.write_text('{"version": "1.1"}')
    with pytest.raises(FinetuneError, match="not a SQuAD file"):
        read_squad(p)


@pytest.mark.parametrize(
    "start, text",
    [
        (-7, "France"),  # context[-7:-1] == "France": Python's slicing must not make it pass
        (-31, "Paris"),  # context[-31:-26] == "Paris"
        (40, "France"),  # beyond the context
        (27, "France"),  # runs past the context's end
    ],
)
def test_answer_start_outside_the_context_is_refused(tmp_path, start, text):
    p = _squad_file(
        tmp_path,
        [{"id": "q7", "question": "q", "answers": [{"text": text, "answer_start": start}]}],
    )
    with pytest.raises(FinetuneError) as e:
        read_squad(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: data[0].paragraphs[0].qas[0].answers[0] (id 'q7'): ")
    assert f"answer_start {start} is outside the context" in msg
    assert msg.endswith("; fix answer_start") and "\n" not in msg
    assert "the text occurs at" in msg


def test_empty_answer_text_is_refused_unless_unanswerable(tmp_path):
    p = _squad_file(
        tmp_path, [{"id": "e", "question": "q", "answers": [{"text": "", "answer_start": 3}]}]
    )
    with pytest.raises(FinetuneError, match=r"\(id 'e'\): empty answer text; .*is_impossible"):
        read_squad(p)
    p = _squad_file(
        tmp_path,
        [
            {
                "id": "e",
                "question": "q",
                "answers": [{"text": "", "answer_start": 3}],
                "is_impossible": True,
            }
        ],
        version="v2.0",
    )
    assert read_squad(p)[0][0].is_impossible


def test_training_answer_covering_no_word_piece_is_refused_or_counted(tok):
    good = _example("good")
    blank = SquadExample("blank", "Who?", CONTEXT, [" "], [CONTEXT.index(" ")])
    with pytest.raises(FinetuneError) as e:
        build_features([good, blank], tok, 48, 16, 8, training=True, path="train-v1.1.json")
    msg = str(e.value)
    assert msg.startswith("train-v1.1.json: question id 'blank': answer ' ' at answer_start 3 ")
    assert "covers no word piece" in msg and "skip_malformed=true" in msg
    skipped: list[str] = []
    feats = build_features([good, blank], tok, 48, 16, 8, training=True, skipped=skipped)
    assert {f.example_index for f in feats} == {0} and len(skipped) == 1
    assert "question id 'blank'" in skipped[0]
    # evaluation never needs the span: every dev question keeps its windows
    dev = build_features([good, blank], tok, 48, 16, 8)
    assert {f.example_index for f in dev} == {0, 1}
