"""GLUE / JSONL / CSV readers: the real GLUE header lines, column lookup by name, clear errors."""

from pathlib import Path

import pytest

from tokendrop.finetuning import FinetuneError
from tokendrop.finetuning.tasks import get_task, subsample
from tokendrop.finetuning.tasks.custom import read_named_columns
from tokendrop.finetuning.tasks.mnli import LABELS as MNLI_LABELS, find_ax_file

# Header lines copied from the GLUE files (identical in ../shared/data/glue, checked below when
# present).
HEADERS = {
    "SST-2": "sentence\tlabel",
    "MNLI-train": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
    "\tsentence1_parse"
    "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
    "MNLI-dev": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
    "\tsentence1_parse"
    "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
    "QNLI": "index\tquestion\tsentence\tlabel",
    "QQP": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
    "RTE": "index\tsentence1\tsentence2\tlabel",
    "AX": "Lexical Semantics\tPredicate-Argument "
    "Structure\tLogic\tKnowledge\tDomain\tPremise\tHypothesis\tLabel",
}
SHARED = Path(__file__).resolve().parents[4] / "shared" / "data" / "glue"


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared stand-in data not present")
def test_headers_match_the_shared_glue_files():
    files = {
        "SST-2": "SST-2/train.tsv",
        "MNLI-train": "MNLI/train.tsv",
        "MNLI-dev": "MNLI/dev_mismatched.tsv",
        "QNLI": "QNLI/train.tsv",
        "QQP": "QQP/train.tsv",
        "RTE": "RTE/train.tsv",
        "AX": "AX/diagnostic-full.tsv",
    }
    for k, f in files.items():
        with open(SHARED / f, encoding="utf-8") as fh:
            assert fh.readline().rstrip("\n") == HEADERS[k], f


def _write(path: Path, header: str, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header] + ["\t".join(r) for r in rows]) + "\n", encoding="utf-8")
    return path


def _mnli_row(i, a, b, lab, dev):
    row = [str(i), str(i), f"{i}e", "fiction", a, b, a, b, a, b, lab]
    return row + (["", "", "", "", lab] if dev else [lab])


def make_glue(root: Path) -> Path:
    _write(
        root / "SST-2" / "train.tsv",
        HEADERS["SST-2"],
        [["a fine film", "1"], ["dull , tedious", "0"]],
    )
    _write(root / "SST-2" / "dev.tsv", HEADERS["SST-2"], [['it \'s "great"', "1"]])
    _write(
        root / "MNLI" / "train.tsv",
        HEADERS["MNLI-train"],
        [
            _mnli_row(0, "A man sleeps.", "A man rests.", "entailment", False),
            _mnli_row(1, "A man sleeps.", "A man runs.", "contradiction", False),
        ],
    )
    _write(
        root / "MNLI" / "dev_matched.tsv",
        HEADERS["MNLI-dev"],
        [_mnli_row(5, "p", "h", "neutral", True), _mnli_row(6, "p2", "h2", "-", True)],
    )
    _write(
        root / "MNLI" / "dev_mismatched.tsv",
        HEADERS["MNLI-dev"],
        [_mnli_row(7, "p", "h", "entailment", True)],
    )
    for t in ("QNLI", "RTE"):
        for f in ("train.tsv", "dev.tsv"):
            _write(
                root / t / f,
                HEADERS[t],
                [["0", "what ?", "this .", "entailment"], ["1", "x", "y", "not_entailment"]],
            )
    for f in ("train.tsv", "dev.tsv"):
        _write(
            root / "QQP" / f,
            HEADERS["QQP"],
            [["0", "1", "2", "how ?", "how so ?", "1"], ["1", "3", "4", ".", "no", "0"]],
        )
    _write(
        root / "AX" / "diagnostic-full.tsv",
        HEADERS["AX"],
        [["", "", "Negation", "", "ACL", "The cat sat.", "The cat did not sit.", "contradiction"]],
    )
    return root


def test_each_glue_reader(tmp_path):
    root = make_glue(tmp_path / "glue")
    sst = get_task("sst2").load(root)  # the GLUE root: finds SST-2/
    assert [(e.text_a, e.text_b, e.label) for e in sst.train] == [
        ("a fine film", None, 1),
        ("dull , tedious", None, 0),
    ]
    assert sst.dev["dev"][0].text_a == 'it \'s "great"'  # no quote processing (QUOTE_NONE)
    mnli = get_task("mnli").load(root / "MNLI")  # or the task dir itself
    assert set(mnli.dev) == {"dev_matched", "dev_mismatched"}
    assert [e.label for e in mnli.train] == [
        MNLI_LABELS.index("entailment"),
        MNLI_LABELS.index("contradiction"),
    ]
    assert mnli.train[0].text_a == "A man sleeps." and mnli.train[0].text_b == "A man rests."
    assert len(mnli.dev["dev_matched"]) == 1  # the "-" (no gold label) pair is skipped
    assert mnli.dev["dev_matched"][0].label == MNLI_LABELS.index("neutral")
    qnli = get_task("qnli").load(root)
    assert qnli.train[0].text_a == "what ?" and qnli.train[0].label == 0
    rte = get_task("rte").load(root)
    assert rte.dev["dev"][1].label == 1
    qqp = get_task("qqp").load(root)
    assert [e.label for e in qqp.train] == [1, 0] and qqp.train[1].text_a == "."
    ax = get_task("ax").read(find_ax_file(root))
    assert ax[0].text_a == "The cat sat." and ax[0].label == MNLI_LABELS.index("contradiction")
    assert find_ax_file(root / "MNLI") == root / "AX" / "diagnostic-full.tsv"


def test_crlf_and_bom_are_tolerated(tmp_path):
    p = tmp_path / "SST-2" / "train.tsv"
    p.parent.mkdir()
    p.write_bytes("\ufeffsentence\tlabel\r\ngood\t1\r\nbad\t0\r\n".encode("utf-8"))
    ex = get_task("sst2").read(p)
    assert [(e.text_a, e.label) for e in ex] == [("good", 1), ("bad", 0)]


@pytest.mark.parametrize(
    "content, msg",
    [
        ("sentence\tlabel\ngood\t1\nbad movie\t0\textra\n", ":3: expected 2 tab-separated fields"),
        ("sentence\tlabel\ngood\t1\nno tab here\n", ":3: expected 2 tab-separated fields"),
        ("sentence\tlabel\ngood\tpositive\n", ":2: unknown label 'positive'"),
        ("sentence\tlabel\ngood\t\n", ":2: empty label"),
        ("text\tlabel\ngood\t1\n", ":1: header lacks column(s) sentence"),
        ("", "empty file"),
    ],
)
def test_malformed_tsv_gives_file_and_line(tmp_path, content, msg):
    p = tmp_path / "train.tsv"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(FinetuneError) as e:
        get_task("sst2").read(p)
    assert str(p) in str(e.value) and msg in str(e.value)
    assert "\n" not in str(e.value)


def test_non_utf8_and_missing_files(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(FinetuneError, match=r"train.tsv:2: not UTF-8"):
        get_task("sst2").read(p)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FinetuneError, match="no train.tsv"):
        get_task("qnli").load(tmp_path / "empty")
    with pytest.raises(FinetuneError, match="does not exist"):
        get_task("qnli").load(tmp_path / "nope")
    with pytest.raises(FinetuneError, match="unknown task 'colab'"):
        get_task("colab")


def test_mnli_wrong_column_count_in_16_column_dev(tmp_path):
    p = _write(
        tmp_path / "dev_matched.tsv",
        HEADERS["MNLI-dev"],
        [_mnli_row(0, "p", "h", "neutral", False)],
    )
    with pytest.raises(
        FinetuneError,
        match=r"dev_matched.tsv:2: expected 16 tab-separated fields as in the header, got 12",
    ):
        get_task("mnli").read(p)


def test_custom_jsonl_and_csv(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        '{"q": "is it?", "a": "yes", "y": "pos"}\n\n{"q": "no?", "a": "no", "y": "neg"}\n'
    )
    (tmp_path / "dev.csv").write_text('q,a,y\n"is it, really?",yes,pos\n')
    d = get_task("custom").load(tmp_path, text_a="q", text_b="a", label="y")
    assert d.spec.labels == ["neg", "pos"]
    assert [(e.text_a, e.text_b, e.label) for e in d.train] == [
        ("is it?", "yes", 1),
        ("no?", "no", 0),
    ]
    assert d.dev["dev"][0].text_a == "is it, really?"
    d2 = get_task("custom").load(tmp_path, text_a="q", text_b="a", label="y", labels=["pos", "neg"])
    assert d2.train[0].label == 0


def test_custom_labels_are_read_by_value_and_a_dev_typo_is_refused(tmp_path):
    """1 in train and 1.0 in dev are one class (not four classes and 0% accuracy); a dev label the
    training set never has is refused at its line instead of becoming an extra class."""
    (tmp_path / "train.jsonl").write_text(
        '{"sentence": "a", "label": 1}\n{"sentence": "b", "label": 0}\n'
    )
    (tmp_path / "dev.jsonl").write_text(
        '{"sentence": "a", "label": 1.0}\n{"sentence": "b", "label": "0"}\n'
    )
    d = get_task("custom").load(tmp_path)
    assert d.spec.labels == ["0", "1"]
    assert [e.label for e in d.train] == [1, 0] and [e.label for e in d.dev["dev"]] == [1, 0]
    (tmp_path / "dev.jsonl").write_text(
        '{"sentence": "a", "label": 1}\n{"sentence": "b", "label": 2}\n'
    )
    with pytest.raises(FinetuneError) as e:
        get_task("custom").load(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'dev.jsonl'}:2: label '2' does not occur in {tmp_path / 'train.jsonl'} "
        "(its labels: 0, 1); fix the label, or list every class in finetune.labels"
    )


@pytest.mark.parametrize(
    "name, content, msg",
    [
        ("train.jsonl", '{"sentence": "ok", "label": 1}\n{"sentence": "x"\n', ":2: invalid JSON"),
        (
            "train.jsonl",
            '{"sentence": "ok", "label": 1}\n{"text": "x", "label": 0}\n',
            ":2: missing key(s) sentence",
        ),
        ("train.jsonl", '["ok", 1]\n', ":1: expected a JSON object"),
        ("train.jsonl", '{"sentence": ["a"], "label": 1}\n', ":1: key 'sentence' must be a string"),
        (
            "train.csv",
            'sentence,label\nok,1\n"a,b",1,extra\n',
            ":3: expected 2 comma-separated fields",
        ),
        ("train.csv", "text,label\nok,1\n", ":1: header lacks column(s) sentence"),
        (
            "train.csv",
            "sentence,sentence,label\nok,other,1\n",
            ":1: the header names column(s) 'sentence' more than once",
        ),
        (
            "train.tsv",
            "sentence\tsentence\tlabel\nok\tother\t1\n",
            ":1: the header names column(s) 'sentence' more than once",
        ),
    ],
)
def test_custom_malformed(tmp_path, name, content, msg):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(FinetuneError) as e:
        read_named_columns(p, "sentence", "", "label")
    assert str(p) in str(e.value) and msg in str(e.value)


def test_subsample_is_deterministic_and_ordered():
    xs = list(range(100))
    a, b = subsample(xs, 10), subsample(xs, 10)
    assert a == b and a == sorted(a) and len(a) == 10
    assert subsample(xs, "all") == xs and subsample(xs, 1000) == xs


def test_skip_malformed_rows_when_asked(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text("sentence\tlabel\ngood\t1\nbroken line\nbad\t0\nodd\tx\n")
    with pytest.raises(FinetuneError, match=r"train.tsv:3: .* set skip_malformed=true"):
        get_task("sst2").read(p)
    skipped = []
    ex = get_task("sst2").read(p, skipped=skipped)
    assert [e.text_a for e in ex] == ["good", "bad"]
    assert len(skipped) == 2 and ":3:" in skipped[0] and ":5: unknown label 'x'" in skipped[1]
