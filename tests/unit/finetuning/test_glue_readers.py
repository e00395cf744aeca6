"""Every GLUE task's reader on its official file layout (the header lines and column orders of the
GLUE distribution, written here by hand), each task's test layout, the task registry, and the
refusal of dev files with no examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toydata import write_glue_examples

from tokendrop.finetuning import FinetuneError
from tokendrop.finetuning.columns import COLUMNS, MAIN_COLUMN
from tokendrop.finetuning.tasks import KINDS, TASKS, get_task
from tokendrop.finetuning.tasks.squad import read_squad

# the GLUE benchmark's tasks (its diagnostic set AX included): a fact of the benchmark, not of the
# registry, which may hold other tasks (each one file, with its own examples: test_task_examples.py)
GLUE = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "ax", "qnli", "rte", "wnli"]
MRPC_H = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
STSB_H = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def _write(path: Path, lines: list[str], bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def test_registry_is_collected_from_the_task_files():
    tasks = Path(__import__("tokendrop.finetuning.tasks", fromlist=["x"]).__file__).parent
    files = {p.stem for p in tasks.glob("*.py")}
    assert {
        "cola",
        "sst2",
        "mrpc",
        "stsb",
        "qqp",
        "mnli",
        "qnli",
        "rte",
        "wnli",
        "squad",
        "custom",
    } <= files
    assert set(GLUE) <= set(TASKS)
    for name, spec in TASKS.items():
        assert spec.kind in KINDS and spec.main in spec.metrics
        assert (spec.kind == "classification") == bool(spec.labels) or name == "custom"
        for alias in spec.aliases:
            assert get_task(alias).name == name and get_task(alias.upper()).name == name
    # transformers' glue_tasks_num_labels / glue_compute_metrics
    want = {
        "cola": (2, {"accuracy", "mcc"}),
        "sst2": (2, {"accuracy"}),
        "mrpc": (2, {"accuracy", "f1"}),
        "stsb": (1, {"pearson", "spearman"}),
        "qqp": (2, {"accuracy", "f1"}),
        "mnli": (3, {"accuracy"}),
        "qnli": (2, {"accuracy"}),
        "rte": (2, {"accuracy"}),
        "wnli": (2, {"accuracy"}),
    }
    for name, (n, metrics) in want.items():
        assert (get_task(name).num_outputs, set(get_task(name).metrics)) == (n, metrics), name
    assert (
        get_task("stsb").kind == "regression"
        and get_task("cola").main == "mcc"
        and get_task("mrpc").main == "f1"
    )
    a = get_task("sst2")
    a.labels.append("x")  # a copy: the registry is not changed through it
    assert TASKS["sst2"].labels == ["0", "1"]


def test_every_column_names_a_metric_its_task_reports():
    for c in COLUMNS:
        spec = TASKS[c.task]
        split_spec = TASKS["ax"] if c.split == "ax" else spec
        assert c.metric in split_spec.metrics and (c.split in spec.dev or c.split == "ax"), c
    # Table 1: every GLUE task has a column
    assert {t for t in GLUE if TASKS[t].train} <= set(MAIN_COLUMN)


def test_cola_headerless_train_and_dev_and_its_test_header(tmp_path):
    d = tmp_path / "CoLA"
    rows = [
        "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.",
        "gj04\t0\t*\tThey drank the pub.",
        'cj99\t1\t\tThe "quoted" word, it\'s fine.',
    ]
    _write(d / "train.tsv", rows)
    _write(d / "dev.tsv", rows[1:2])
    _write(
        d / "test.tsv",
        ["index\tsentence", "0\tBill whistled past the house.", "1\tThe car honked down the road."],
    )
    data = get_task("cola").load(tmp_path)  # the GLUE root: finds CoLA/
    # no quote processing
    assert [(e.text_a, e.text_b, e.label) for e in data.train] == [
        ("Our friends won't buy this analysis, let alone the next one we propose.", None, 1),
        ("They drank the pub.", None, 0),
        ('The "quoted" word, it\'s fine.', None, 1),
    ]
    # line 1 is data
    assert len(data.dev["dev"]) == 1 and data.dev["dev"][0].where.endswith("dev.tsv:1")
    test = get_task("cola").read(d / "test.tsv", labelled=False)
    assert [(e.guid, e.text_a, e.label) for e in test] == [
        ("0", "Bill whistled past the house.", None),
        ("1", "The car honked down the road.", None),
    ]


def test_cola_file_with_a_header_or_a_bad_row_is_one_line(tmp_path):
    p = _write(tmp_path / "train.tsv", ["sentence\tlabel", "good\t1"])
    with pytest.raises(FinetuneError) as e:
        get_task("cola").read(p)
    msg = str(e.value)
    assert (
        f"{p}:1: expected 4 tab-separated fields" in msg
        and "no header row" in msg
        and "\n" not in msg
    )
    p = _write(tmp_path / "dev.tsv", ["gj04\t2\t\tA sentence."])
    with pytest.raises(FinetuneError, match=r"dev.tsv:1: unknown label '2' for cola"):
        get_task("cola").read(p)


def test_mrpc_official_layout_with_bom(tmp_path):
    d = tmp_path / "MRPC"
    _write(
        d / "train.tsv",
        [
            MRPC_H,
            "1\t702876\t702977\tAmrozi accused his brother .\tReferring to him , Amrozi "
            "accused his brother .",
            "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tYucaipa "
            "bought Dominick 's in 1995 .",
        ],
        bom=True,
    )
    _write(d / "dev.tsv", [MRPC_H, "1\t1\t2\ta\tb"])
    _write(
        d / "test.tsv",
        [
            "index\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "0\t1089874\t1089925\tPCCW 's chief .\tCurrent Chief .",
        ],
    )
    data = get_task("mrpc").load(d)
    assert [(e.text_a, e.label) for e in data.train] == [
        ("Amrozi accused his brother .", 1),
        ("Yucaipa owned Dominick 's .", 0),
    ]
    assert data.train[1].text_b == "Yucaipa bought Dominick 's in 1995 ."
    test = get_task("mrpc").read(d / "test.tsv", labelled=False)
    assert (test[0].guid, test[0].text_a, test[0].text_b) == (
        "0",
        "PCCW 's chief .",
        "Current Chief .",
    )


def test_stsb_ten_columns_float_scores(tmp_path):
    d = tmp_path / "STS-B"
    _write(
        d / "train.tsv",
        [
            STSB_H,
            "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
            "An air plane is taking off.\t5.000",
            "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\t"
            "A man is playing a flute.\tA man is playing a bamboo flute.\t3.800",
        ],
    )
    _write(d / "dev.tsv", [STSB_H, "0\tmain-forums\tx\t2015\t0\tnone\tnone\ta\tb\t0.000"])
    _write(
        d / "test.tsv",
        [
            STSB_H.rsplit("\t", 1)[0],
            "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is "
            "styling her hair.\tA girl is brushing her hair.",
        ],
    )
    data = get_task("stsb").load(tmp_path)
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in data.train] == [
        ("0", "A plane is taking off.", "An air plane is taking off.", 5.0),
        ("1", "A man is playing a flute.", "A man is playing a bamboo flute.", 3.8),
    ]
    assert data.dev["dev"][0].label == 0.0 and isinstance(data.dev["dev"][0].label, float)
    test = get_task("stsb").read(d / "test.tsv", labelled=False)
    assert test[0].text_b == "A girl is brushing her hair." and test[0].label is None
    for bad, msg in (
        ("high", "label 'high' in column 'score' is not a number"),
        ("nan", "is not finite"),
    ):
        p = _write(tmp_path / f"bad-{bad}.tsv", [STSB_H, f"0\tg\tf\ty\t0\tn\tn\ta\tb\t{bad}"])
        with pytest.raises(FinetuneError, match=rf"bad-{bad}.tsv:2: .*{msg}"):
            get_task("stsb").read(p)


def test_wnli_rte_qnli_qqp_sst2_test_layouts(tmp_path):
    _write(
        tmp_path / "WNLI" / "train.tsv",
        [
            "index\tsentence1\tsentence2\tlabel",
            "0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1",
        ],
    )
    _write(
        tmp_path / "WNLI" / "dev.tsv",
        ["index\tsentence1\tsentence2\tlabel", "0\tThe drain is clogged.\tIt is clogged.\t0"],
    )
    data = get_task("wnli").load(tmp_path)
    assert [(e.guid, e.text_b, e.label) for e in data.train] == [("0", "The carrot had a hole.", 1)]
    layouts = {
        "wnli": "index\tsentence1\tsentence2",
        "rte": "index\tsentence1\tsentence2",
        "qnli": "index\tquestion\tsentence",
        "qqp": "id\tquestion1\tquestion2",
        "sst2": "index\tsentence",
    }
    for name, header in layouts.items():
        n = header.count("\t")
        p = _write(
            tmp_path / f"{name}-test.tsv", [header, "\t".join(["7", "first", "second"][: n + 1])]
        )
        ex = get_task(name).read(p, labelled=False)
        assert [(e.guid, e.text_a, e.text_b, e.label) for e in ex] == [
            ("7", "first", "second" if n == 2 else None, None)
        ]


@pytest.mark.parametrize("task", GLUE)
def test_generated_glue_in_official_layouts(task, tmp_path_factory):
    """Every GLUE task reads lab's toy GLUE files (train, dev and test: the study's generated
    tasks)."""
    root = tmp_path_factory.getbasetemp() / "toy-glue"
    if not root.is_dir():
        write_glue_examples(root, n_train=12, n_dev=6)
    spec = get_task(task)
    d = root / spec.dirname
    if spec.train:
        data = spec.load(root)
        assert len(data.train) == 12 and set(data.dev) == set(spec.dev)
        assert all(len(v) == 6 for v in data.dev.values())
        for e in data.train:
            assert (
                isinstance(e.label, float)
                if spec.kind == "regression"
                else e.label in range(len(spec.labels))
            )
            assert e.text_a and (e.text_b is None) == (task in ("cola", "sst2"))
    else:  # AX: evaluation only
        assert len(spec.read(d / spec.dev["ax"])) == 6
    for f in spec.test.values():
        ex = spec.read(d / f, labelled=False)
        assert ex and all(e.label is None and e.text_a for e in ex)


@pytest.mark.parametrize(
    "task, lines",
    [
        ("sst2", ["sentence\tlabel"]),
        ("cola", []),
        ("stsb", [STSB_H]),
        ("mrpc", [MRPC_H, ""]),
        ("mnli", None),  # only pairs without a gold label ("-")
    ],
)
def test_dev_file_without_examples_is_refused(task, lines, tmp_path):
    """A dev split of 0 examples would be scored 0.00 and pass for a result: refused, naming the
    file."""
    root = write_glue_examples(tmp_path / "glue", n_train=4, n_dev=2)
    spec = get_task(task)
    dev = root / spec.dirname / next(iter(spec.dev.values()))
    if lines is None:
        header, *rows = dev.read_text().splitlines()
        lines = [header] + ["\t".join(r.split("\t")[:-1] + ["-"]) for r in rows]
    dev.write_text("\n".join(lines) + ("\n" if lines else ""))
    with pytest.raises(FinetuneError) as e:
        spec.load(root)
    assert str(e.value).startswith(f"{dev}: no examples to evaluate on") and "\n" not in str(
        e.value
    )


def test_ax_and_squad_dev_without_examples_are_refused(tmp_path):
    ax = _write(
        tmp_path / "AX" / "diagnostic-full.tsv",
        [
            "Lexical Semantics\tPredicate-Argument Structure\tLogic\t"
            "Knowledge\tDomain\tPremise\tHypothesis\tLabel"
        ],
    )
    with pytest.raises(FinetuneError, match=rf"^{ax}: no examples to evaluate on"):
        get_task("mnli").extra_dev(tmp_path, tmp_path / "MNLI", str(ax), None)
    sq = tmp_path / "dev-v1.1.json"
    sq.write_text(json.dumps({"version": "1.1", "data": []}))
    with pytest.raises(FinetuneError, match=rf"^{sq}: no questions"):
        read_squad(sq, 1)


def test_a_task_given_another_tasks_data_says_they_do_not_match(tmp_path):
    import pytest

    from tokendrop.finetuning.common import FinetuneError
    from tokendrop.finetuning.tasks import TASKS, load_task

    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_text(
            "sentence\tlabel\na fine film\t1\na dull film\t0\n", encoding="utf-8"
        )
    with pytest.raises(
        FinetuneError,
        match=r"train.tsv:1: header lacks column\(s\) #1 String, #2 String, Quality \(found: "
        r"sentence, label\); the task and the data do not match: this is sst2 data, not mrpc's "
        r"\(pass --task sst2, or mrpc's own files\)$",
    ) as e:
        load_task(TASKS["mrpc"], tmp_path)
    assert "\n" not in str(e.value)
    # no task's layout: no hint
    (tmp_path / "train.tsv").write_text("text\tlabel\nx\t1\n", encoding="utf-8")
    with pytest.raises(FinetuneError, match=r"\(found: text, label\)$"):
        load_task(TASKS["mrpc"], tmp_path)


@pytest.mark.parametrize("task", ["cola", "stsb"])
def test_a_dev_split_of_one_label_is_refused_where_its_metric_correlates(task, tmp_path):
    """CoLA's MCC and STS-B's correlations are undefined on a dev split whose labels are all one
    value (a score of 0.0 there would mean nothing): refused before anything trains, naming the
    file and the metric; accuracy tasks are scored on such a split as usual."""
    from tokendrop.finetuning.suite import SuiteConfig, check_dev_sets

    write_glue_examples(tmp_path, n_train=8, n_dev=6)
    spec = get_task(task)
    dev = tmp_path / spec.dirname / "dev.tsv"
    lines = dev.read_text().splitlines()
    head, rows = (lines[:1], lines[1:]) if task == "stsb" else ([], lines)
    # the same label in every row: CoLA's second field, STS-B's last
    one = [
        "\t".join(f[:-1] + ["2.5"]) if task == "stsb" else "\t".join(f[:1] + ["1"] + f[2:])
        for f in (r.split("\t") for r in rows)
    ]
    dev.write_text("\n".join(head + one) + "\n")
    cfg = SuiteConfig(glue_data=str(tmp_path), tasks=[task])
    with pytest.raises(FinetuneError) as e:
        check_dev_sets(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "dev labels is" in msg and "is undefined on it" in msg
    assert ("Pearson and Spearman" if task == "stsb" else "Matthews correlation") in msg
    dev2 = tmp_path / "SST-2" / "dev.tsv"  # accuracy: one class is a fine dev split
    rows = dev2.read_text().splitlines()
    dev2.write_text("\n".join([rows[0]] + [r.rsplit("\t", 1)[0] + "\t1" for r in rows[1:]]) + "\n")
    assert check_dev_sets(SuiteConfig(glue_data=str(tmp_path), tasks=["sst2"])) == {"sst2/dev": 6}
