"""The lab's configs name a size's source as the library's do (tokendrop.lab.sizes.LAB_NAMED_SIZES):
the benchmark's model shape and attention dropout ("preset"), documents ("row"), peak ("table"),
time budget ("none") and threads ("auto"), the long-context run's too and its memory limit
("machine"), the campaign's largest-batch memory ("device"), a study's prepare workers ("auto"),
corpus ("all") and vocabulary ("source"); 0 or a negative size is refused in one line naming the
field, the name and the fix, and a study's own study.toml written with 0 still loads."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tokendrop.config import THREADS_AUTO
from tokendrop.errors import ConfigError
from tokendrop.lab.bench.campaign.config import campaign_config
from tokendrop.lab.bench.longctx import longctx_from_dict
from tokendrop.lab.bench.presets import bench_config
from tokendrop.lab.sizes import (
    BATCH_MEMORY_DEVICE,
    BUDGET_NONE,
    CORPUS_ALL,
    DOCUMENT_ROW,
    LAB_NAMED_SIZES,
    MEMORY_MACHINE,
    PEAK_TABLE,
    SHAPE_FIELDS,
    SHAPE_PRESET,
    TOY_VOCAB_SIZE,
    VOCAB_SOURCE,
)
from tokendrop.lab.study.data import data_fingerprint, trained_vocab_size
from tokendrop.lab.study.spec import load_study

REPO = Path(__file__).resolve().parents[3]


def _build(key: str, value):
    """A config whose field ``key`` (LAB_NAMED_SIZES's key) is ``value``, validated; the field its
    message names."""
    section, _, rest = key.partition(".")
    if section == "bench":
        return bench_config({rest: value}), key
    if section == "longctx":
        *table, name = rest.split(".")
        # a family's shape: the rest of it the model preset's too
        shape = {k: SHAPE_PRESET for k in SHAPE_FIELDS}
        values = {table[0]: shape | {name: value}} if table else {name: value}
        return longctx_from_dict(values), key
    if section == "campaign":
        return campaign_config("gpu", [f"bench.{rest}={json.dumps(value)}"]), f"bench.{rest}"
    if section == "study":
        return load_study("study-tiny", [f"{rest}={json.dumps(value)}"]), key
    raise AssertionError(f"no builder for {key}")


# a shape the presets' other fields divide (cpu-*: 4 heads, modern-base: 12, widths of 256, 768)
SHAPE_SAMPLE = {"hidden_size": 768, "num_heads": 2, "intermediate_size": 512}


def _positive(key: str, size) -> object:
    """A size the field takes besides its name."""
    return SHAPE_SAMPLE.get(key.split(".")[-1]) or next(v for v in (2, 0.5, 128) if size.ok(v))


REFUSED = [(key, v) for key, size in LAB_NAMED_SIZES.items() for v in (0, -1) if not size.ok(v)]


@pytest.mark.parametrize(("key", "value"), REFUSED)
def test_a_lab_size_of_zero_or_less_is_refused_naming_its_source(key, value):
    size = LAB_NAMED_SIZES[key]
    field = _build(key, size.name)[1]  # the name itself is taken
    _build(key, _positive(key, size))  # and a size
    with pytest.raises(ConfigError) as e:
        _build(key, value)
    msg = str(e.value)
    head = f"{field}: expected {size.takes} or {size.name!r} ({size.means}), got "
    assert msg.startswith(head), msg
    assert msg[len(head) :].split(";")[0] in (str(value), str(float(value)))
    assert msg.endswith(f'; write {field} = "{size.name}" to {size.fix}')
    assert "\n" not in msg


def test_every_named_size_refuses_a_negative_one():
    assert {k for k, _ in REFUSED if _ == -1} == set(LAB_NAMED_SIZES)


def test_a_genuine_zero_stays():
    """0 that means zero of the thing: no attention dropout."""
    assert bench_config({"attention_dropout": 0.0}).model_config().attention_dropout == 0.0
    assert bench_config({}).model_config().attention_dropout == 0.1  # "preset": BERT's


def test_the_lab_defaults_are_the_names():
    b = bench_config({})
    assert [getattr(b, k) for k in SHAPE_FIELDS] == [SHAPE_PRESET] * 4
    assert (b.attention_dropout, b.peak_tflops, b.time_budget_s, b.threads) == (
        SHAPE_PRESET,
        PEAK_TABLE,
        BUDGET_NONE,
        THREADS_AUTO,
    )
    lc = longctx_from_dict({"bert": {"num_layers": SHAPE_PRESET}})
    assert (lc.threads, lc.memory_limit_gib, lc.time_budget_s, lc.document_tokens) == (
        THREADS_AUTO,
        MEMORY_MACHINE,
        BUDGET_NONE,
        DOCUMENT_ROW,
    )
    assert lc.bench_config(lc.bert, lc.seq_lens[0]).model_config().num_layers == 6  # cpu-6x256's
    camp = campaign_config("gpu")
    assert (camp.bench.threads, camp.bench.max_batch_memory_bytes) == (
        THREADS_AUTO,
        BATCH_MEMORY_DEVICE,
    )
    st = load_study("study-gpu")
    assert (st.corpus_max_bytes, st.vocab_size) == (CORPUS_ALL, VOCAB_SOURCE)


def test_a_named_shape_is_the_model_presets_and_a_given_one_overrides_it():
    assert bench_config({"num_layers": 2}).model_config().num_layers == 2
    assert bench_config({}).model_config().num_layers == 12  # cpu-12x256


def test_toy_data_with_the_source_vocabulary_trains_the_toy_size():
    toy = load_study("study-tiny", [f'vocab_size="{VOCAB_SOURCE}"'])
    assert trained_vocab_size(toy) == TOY_VOCAB_SIZE
    assert trained_vocab_size(load_study("study-tiny")) == 300


def test_a_data_fingerprint_keeps_the_numbers_an_older_study_prepared_with():
    """A study's data prepared before these sizes were named (fingerprint 0: whole corpus, no
    vocabulary trained) is still reused: the fingerprint writes the names as those numbers."""
    # the preset's vocabulary file is offline data this test does not need: only the numbers
    st = dataclasses.replace(load_study("study-gpu"), vocab="")
    fp = data_fingerprint(st)
    assert (fp["corpus_max_bytes"], fp["vocab_size"]) == (0, 0)
    cpu = data_fingerprint(load_study("study-cpu"))
    assert (cpu["corpus_max_bytes"], cpu["vocab_size"]) == (12_000_000, 8192)


def test_a_study_toml_an_older_study_wrote_with_zeros_loads(tmp_path):
    """The committed study records hold ``prepare_workers = 0`` and ``vocab_size = 0`` (written
    before the names): read as a record they load with the names; read as a preset the 0 is
    refused."""
    committed = REPO / "docs" / "study-recipe" / "study.toml"
    text = committed.read_text(encoding="utf-8")
    assert "prepare_workers = 0" in text and "vocab_size = 0" in text
    st = load_study(committed, recorded=True)
    assert (st.prepare_workers, st.vocab_size) == (THREADS_AUTO, VOCAB_SOURCE)
    with pytest.raises(ConfigError, match="^study.prepare_workers: expected a positive integer"):
        load_study(committed)
    whole = tmp_path / "study.toml"
    shutil.copy(REPO / "docs" / "study-cpu" / "study.toml", whole)
    lines = whole.read_text(encoding="utf-8").split("\n")
    lines = ["corpus_max_bytes = 0" if ln.startswith("corpus_max_bytes") else ln for ln in lines]
    whole.write_text("\n".join(lines), encoding="utf-8")
    assert load_study(whole, recorded=True).corpus_max_bytes == CORPUS_ALL
    with pytest.raises(ConfigError, match="^study.corpus_max_bytes: expected a positive number"):
        load_study(whole, ["prepare_workers=1"])


@pytest.mark.parametrize("name", ["study-continue", "study-recipe", "study-strong", "study-cpu"])
def test_every_committed_study_record_loads(name):
    load_study(REPO / "docs" / name / "study.toml", recorded=True)
