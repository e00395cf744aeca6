"""ModernBERT's byte-level BPE tokenizer: ``prepare --tokenizer``, ``pretrain
--init``, ``finetune --model``, ``export`` and ``inspect`` work with a ``tokenizer.json`` that is
not BERT WordPiece, with ``transformers.AutoTokenizer``'s ids.  Everything is built here, offline: a
byte-level BPE trained on generated text, laid out like answerdotai/ModernBERT-base's tokenizer
directory (``toydata.write_bpe_tokenizer_dir`` of tests/fixtures), and tiny random
``transformers.ModernBertForMaskedLM`` models whose embedding is padded past the tokenizer."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402
from toydata import write_bpe_tokenizer_dir, write_documents, write_squad_examples

from tokendrop.cli import main as cli_main  # noqa: E402
from tokendrop.data import DataError, MLMLoader, MLMMasker, PreparedData, prepare  # noqa: E402
from tokendrop.data.tokenizer import (
    load_tokenizer,
    num_ids,
    read_tokenizer_spec,
    special_added_ids,
    tokenizer_vocab_sha256,
)
from tokendrop.finetuning.common import FinetuneError  # noqa: E402
from tokendrop.finetuning.task_corpus import task_corpus_documents
from tokendrop.finetuning.tasks import TASKS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# the models' embeddings are this many rows larger than the tokenizer (ModernBERT: 50368 vs 50285)
PAD_ROWS = 3
TEXTS = [
    "hello world",
    " leading space",
    "trailing space ",
    "tabs\tand  double  spaces\n\nand newlines\r\n",
    "Café naïve Zürich — 東京 😀 déjà",
    "cafe\u0301 vs café",
    "a [MASK] b [SEP] c",
    "[CLS]x[PAD]",
    "",
    "   ",
    "|||IP_ADDRESS||| and    four spaces",
    "<|endoftext|>x",
    "UPPER lower MiXeD 123 4.5 !?",
    "\u200b\ufeff\x07",
]
SMALL = [
    "train.batch_size=4",
    "train.batch_warmup_start=2",
    "train.eval_batches=1",
    "train.eval_every=2",
    "train.log_every=1",
    "train.ckpt_every=2",
    "train.warmup_steps=0",
    "train.device=cpu",
    "train.precision=fp32",
    "data.num_workers=0",
    "train.head_warmup_steps=0",
    "drop.importance_init_batches=1",
]


def auto(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


def copy_tokenizer_files(src, dst) -> None:
    for n in TOKENIZER_FILES:
        if (src / n).is_file():
            shutil.copyfile(src / n, dst / n)


def modern_dir(path, tok_dir, vocab_size: int):
    """A tiny random ModernBertForMaskedLM (ids from the tokenizer) saved with ``tok_dir``'s
    files."""
    tok, names = load_tokenizer(tok_dir), read_tokenizer_spec(tok_dir).special_tokens
    cls, sep, pad = (tok.token_to_id(names[k]) for k in ("cls", "sep", "pad"))
    # a model too small for its tokenizer (an error case): ids it can build with
    if pad >= vocab_size:
        cls, sep, pad = 0, 1, 2
    torch.manual_seed(0)
    conf = transformers.ModernBertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=16,
        pad_token_id=pad,
        sep_token_id=sep,
        eos_token_id=sep,
        cls_token_id=cls,
        bos_token_id=cls,
    )
    transformers.ModernBertForMaskedLM(conf).save_pretrained(path)
    copy_tokenizer_files(tok_dir, path)
    return path


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    return write_bpe_tokenizer_dir(tmp_path_factory.mktemp("bpe") / "tok")


@pytest.fixture(scope="module")
def model_dir(bpe_dir, tmp_path_factory):
    return modern_dir(
        tmp_path_factory.mktemp("modern") / "hf",
        bpe_dir,
        num_ids(load_tokenizer(bpe_dir)) + PAD_ROWS,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Task-word documents, a few with literal special-token strings and unicode in them."""
    docs = task_corpus_documents(num_docs=160, seed=5)
    odd = [
        "the [SEP] is here and [CLS] there\n[MASK] [PAD] [UNK] <|endoftext|> <|padding|>",
        "Café naïve — 東京 😀\ttabs  and   spaces",
        "|||IP_ADDRESS||| said    hello",
    ]
    for i, o in enumerate(odd):
        docs[10 + 40 * i] += "\n" + o
    return write_documents(tmp_path_factory.mktemp("corpus") / "corpus.txt", docs), docs


# ----------------------------------------------------------------------------------------------
# (a) ids


def test_ids_equal_autotokenizer(bpe_dir, tmp_path):
    spec = read_tokenizer_spec(bpe_dir)
    assert (spec.backend, spec.model_type, spec.model_max_length) == ("file", "BPE", 8192)
    ours, ref = load_tokenizer(bpe_dir), auto(bpe_dir)
    assert num_ids(ours) == len(ref)
    # added after the BPE vocabulary, as in ModernBERT
    assert [ours.token_to_id(t) for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")] == list(
        range(len(ref) - 5, len(ref))
    )
    texts = TEXTS + task_corpus_documents(num_docs=20, seed=9)
    assert [e.ids for e in ours.encode_batch(texts)] == ref(texts)["input_ids"]
    assert [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)] == ref(
        texts, add_special_tokens=False
    )["input_ids"]
    pairs = [(a, b) for a in TEXTS for b in TEXTS[::3]]
    want = ref([a for a, _ in pairs], [b for _, b in pairs], return_token_type_ids=True)
    encs = ours.encode_batch(pairs)
    assert [e.ids for e in encs] == want["input_ids"]
    assert [e.type_ids for e in encs] == want["token_type_ids"]
    # the same tokenizer as transformers itself saves it (v5: TokenizersBackend, no
    # special_tokens_map.json)
    saved = tmp_path / "saved"
    ref.save_pretrained(str(saved))
    assert [e.ids for e in load_tokenizer(saved).encode_batch(texts)] == auto(saved)(texts)[
        "input_ids"
    ]
    # a model dir whose config.json says modernbert, with a bare tokenizer.json: loaded as it is too
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(bpe_dir / "tokenizer.json", bare / "tokenizer.json")
    (bare / "config.json").write_text(json.dumps({"model_type": "modernbert"}))
    assert read_tokenizer_spec(bare).backend == "file"
    assert [e.ids for e in load_tokenizer(bare).encode_batch(texts)] == ref(texts)["input_ids"]


def test_a_file_without_post_processor_gets_cls_sep(tmp_path):
    """Documented difference: transformers encodes such a file without [CLS]/[SEP]; we frame it."""
    d = write_bpe_tokenizer_dir(tmp_path / "nopp", post_processor=False)
    ours, ref = load_tokenizer(d), auto(d)
    cls, sep = ours.token_to_id("[CLS]"), ours.token_to_id("[SEP]")
    assert [e.ids for e in ours.encode_batch(TEXTS)] == [
        [cls, *r, sep] for r in ref(TEXTS)["input_ids"]
    ]
    enc = ours.encode("a b", "c")
    assert enc.ids == [cls, *ref("a b")["input_ids"], sep, *ref("c")["input_ids"], sep]
    assert enc.type_ids == [0] * (len(enc.ids) - len(ref("c")["input_ids"]) - 1) + [1] * (
        len(ref("c")["input_ids"]) + 1
    )


def test_unigram_tokenizer_json_is_used_as_it_is(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(
        task_corpus_documents(num_docs=80, seed=2),
        trainers.UnigramTrainer(
            vocab_size=150,
            special_tokens=["<pad>", "<unk>", "<cls>", "<sep>", "<mask>"],
            unk_token="<unk>",
            show_progress=False,
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<cls> $A <sep>",
        pair="<cls> $A <sep> $B:1 <sep>:1",
        special_tokens=[("<cls>", 2), ("<sep>", 3)],
    )
    d = tmp_path / "uni"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                **{f"{k}_token": f"<{k}>" for k in ("pad", "unk", "cls", "sep", "mask")},
            }
        )
    )
    assert read_tokenizer_spec(d).model_type == "Unigram"
    texts = TEXTS + ["alice wrote the river play ."]
    assert [e.ids for e in load_tokenizer(d).encode_batch(texts)] == auto(d)(texts)["input_ids"]


# ----------------------------------------------------------------------------------------------
# (b) prepare


def test_prepare_frames_with_the_tokenizers_ids(bpe_dir, corpus, tmp_path):
    path, docs = corpus
    out = tmp_path / "p"
    assert (
        cli_main(
            [
                "prepare",
                "--corpus",
                str(path),
                "--out",
                str(out),
                "--seq-len",
                "32",
                "--tokenizer",
                str(bpe_dir),
                "--eval-fraction",
                "0",
                "--workers",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    pd = PreparedData.open(out)
    meta = pd.meta
    assert meta["tokenizer"]["backend"] == "file" and meta["tokenizer"]["model"] == "BPE"
    assert (
        sorted(meta["tokenizer"]["files"]) == sorted(TOKENIZER_FILES)
        and meta["tokenizer"]["generated_files"] == []
    )
    assert not (out / "vocab.txt").exists()
    for n in TOKENIZER_FILES:  # the source's files, byte for byte
        assert (out / n).read_bytes() == (bpe_dir / n).read_bytes()
    sha = hashlib.sha256((bpe_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert pd.vocab_hash == sha == tokenizer_vocab_sha256(bpe_dir) == tokenizer_vocab_sha256(out)
    ref = auto(bpe_dir)
    # a tokenizer dir: no config.json to pad to
    assert pd.vocab_size == meta["tokenizer"]["num_ids"] == len(ref)
    ids = {
        k: ref.convert_tokens_to_ids(t)
        for k, t in {
            "pad": "[PAD]",
            "unk": "[UNK]",
            "cls": "[CLS]",
            "sep": "[SEP]",
            "mask": "[MASK]",
        }.items()
    }
    assert pd.special_ids == ids
    rows = np.asarray(pd.sequences("train"), dtype=np.int64)
    assert (rows[:, 0] == ids["cls"]).all() and (rows[:, -1] == ids["sep"]).all()
    specials = set(special_added_ids(load_tokenizer(bpe_dir)))
    assert ids["sep"] in specials and len(specials) == 6  # the five and <|endoftext|>
    assert not np.isin(rows[:, 1:], list(specials - {ids["sep"]})).any()
    # the document tokens are AutoTokenizer's with special-token strings read as text
    # (split_special_tokens), in corpus order, separated by [SEP] only
    want = np.concatenate(
        [
            np.asarray(e, np.int64)
            for e in ref(docs, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ]
    )
    assert not np.isin(want, list(specials)).any()
    body = rows[:, 1:-1].ravel()
    got = body[body != ids["sep"]].tolist()
    info = meta["splits"]["train"]
    assert len(want) - len(got) == info["dropped_tail_tokens"] + info.get(
        "dropped_boundary_tokens", 0
    )
    it = iter(want.tolist())  # in order, only the packer's counted drops missing
    assert all(any(t == w for w in it) for t in got)
    # masking: the random replacements are never a special token (nor an id no token maps to)
    masker = MLMMasker(pd.special_ids, pd.vocab(), pd.seq_len, exclude_ids=pd.special_token_ids())
    assert not set(masker.random_pool.tolist()) & specials and len(masker.random_pool) == len(
        ref
    ) - len(specials)
    batch = next(iter(MLMLoader(pd, "train", batch_size=4, seed=0, num_workers=0)))
    assert int(batch["input_ids"].max()) < pd.vocab_size


# ----------------------------------------------------------------------------------------------
# (c) continued pretraining and export, (d) fine-tuning


@pytest.mark.slow
def test_pretrain_init_export_inspect(model_dir, bpe_dir, corpus, tmp_path, capsys):
    data, run, exp = tmp_path / "data", tmp_path / "run", tmp_path / "export"
    assert (
        cli_main(
            [
                "prepare",
                "--corpus",
                str(corpus[0]),
                "--out",
                str(data),
                "--seq-len",
                "32",
                "--tokenizer",
                str(model_dir),
                "--eval-fraction",
                "0.1",
                "--workers",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    pd = PreparedData.open(data)
    n = num_ids(load_tokenizer(bpe_dir))
    # config.json's padded size
    assert (pd.vocab_size, pd.meta["tokenizer"]["num_ids"]) == (
        n + PAD_ROWS,
        n,
    )
    assert np.load(data / "token_counts.npy")[n:].sum() == 0
    assert (
        cli_main(
            [
                "pretrain",
                "--config",
                "continue",
                "--init",
                str(model_dir),
                "--out",
                str(run),
                "--set",
                f"data.path={json.dumps(str(data))}",
                "--set",
                "train.steps=2",
                "--set",
                "drop.method=cumulative",
                *sum((["--set", s] for s in SMALL), []),
            ]
        )
        == 0
    )
    assert cli_main(["export", str(run), str(exp)]) == 0
    assert cli_main(["inspect", str(run)]) == 0
    # byte-level pieces shown as text ("Ġthe" -> "▁the")
    for f in (
        "tokens.md",
        "examples.json",
        "examples.html",
    ):
        shown = (run / "inspect" / f).read_text(encoding="utf-8")
        shown = str(json.loads(shown)) if f.endswith(".json") else shown
        assert "\u2581" in shown and "\u0120" not in shown, f
    for d in (exp, run, data):
        assert cli_main(["verify", str(d)]) == 0, d
    capsys.readouterr()
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(exp, output_loading_info=True)
    assert type(back).__name__ == "ModernBertForMaskedLM" and not info["missing_keys"]
    assert back.config.vocab_size == n + PAD_ROWS
    for f in TOKENIZER_FILES:
        assert (exp / f).read_bytes() == (bpe_dir / f).read_bytes()
    assert auto(exp)(TEXTS)["input_ids"] == auto(model_dir)(TEXTS)["input_ids"]
    with torch.no_grad():  # the exported model runs on the exported tokenizer's ids
        enc = auto(exp)(["alice wrote the river play ."], return_tensors="pt")
        assert torch.isfinite(back(**enc).logits).all()
    # the run's own tokenizer (RUN/tokenizer, from the data) is the same one
    assert (run / "tokenizer" / "tokenizer.json").read_bytes() == (
        bpe_dir / "tokenizer.json"
    ).read_bytes()


@pytest.mark.slow
def test_finetune_accepts_a_bpe_modernbert_dir(model_dir, tmp_path):
    from tokendrop.config import FinetuneConfig
    from tokendrop.finetuning import finetune

    task = TASKS["sst2"].write_examples(tmp_path / "SST-2", n_train=32, n_dev=16)
    cfg = FinetuneConfig(
        task="sst2",
        data=str(task),
        epochs=1,
        batch_size=16,
        max_seq_len=32,
        device="cpu",
        save_model=True,
        log_every=0,
    ).validate()
    res = finetune(cfg, model_dir, tmp_path / "ft", log=None)
    assert 0.0 <= res["accuracy"] <= 100.0
    saved = tmp_path / "ft" / "model"
    assert (saved / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    assert auto(saved)(TEXTS)["input_ids"] == auto(model_dir)(TEXTS)["input_ids"]


def test_finetune_uses_the_declared_special_tokens(tmp_path):
    """A tokenizer whose specials are not BERT's names (``<pad>``, ``<cls>``, ``<sep>``, as
    mmBERT-style tokenizers declare them): fine-tuning pads with ``<pad>`` and frames SQuAD windows
    with ``<cls>``/``<sep>``."""
    from tokendrop.config import FinetuneConfig
    from tokendrop.finetuning import finetune
    from tokendrop.finetuning.fit import _load_model_and_tokenizer
    from tokendrop.finetuning.tasks.squad import build_features, read_squad
    from tokendrop.models.bert.model import BertForQuestionAnswering

    names = ("<unk>", "<cls>", "<sep>", "<pad>", "<mask>")
    tok_dir = write_bpe_tokenizer_dir(tmp_path / "tok", specials=names)
    tok = load_tokenizer(tok_dir)
    assert tok.token_to_id("[PAD]") is None and tok.token_to_id("[CLS]") is None
    model = modern_dir(tmp_path / "hf", tok_dir, num_ids(tok) + PAD_ROWS)
    _, _, tok2, _, specials = _load_model_and_tokenizer(model, BertForQuestionAnswering, 64)
    want = {k: tok.token_to_id(n) for k, n in zip(("unk", "cls", "sep", "pad", "mask"), names)}
    assert specials == want and len(set(want.values())) == 5
    squad = write_squad_examples(tmp_path / "squad", n_train=8, n_dev=4)
    examples, _ = read_squad(squad / "dev-v1.1.json", 1)
    feats = build_features(examples, tok2, 48, 16, 12, specials=specials)
    ids = feats[0].input_ids
    assert ids[0] == want["cls"] and ids[-1] == want["sep"] and ids.count(want["sep"]) == 2
    with pytest.raises(FinetuneError, match="lacks its declared cls or sep"):
        build_features(examples, tok2, 48, 16, 12)  # BERT's names are not in this vocabulary
    cfg = FinetuneConfig(
        task="squad1",
        data=str(squad),
        epochs=1,
        batch_size=4,
        max_seq_len_qa=48,
        doc_stride=16,
        max_query_len=12,
        device="cpu",
        log_every=0,
    ).validate()
    res = finetune(cfg, model, tmp_path / "ft", log=None)
    assert 0.0 <= res["scores"]["squad1"] <= 100.0


# ----------------------------------------------------------------------------------------------
# (e) bad input


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_declared_special_token_missing_from_the_file(bpe_dir, corpus, tmp_path):
    d = tmp_path / "nomask"
    shutil.copytree(bpe_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["mask_token"] = "<mask>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError) as e:
        load_tokenizer(d)
    msg = _one_line(e)
    assert (
        msg.startswith(str(d / "tokenizer.json"))
        and "mask_token '<mask>'" in msg
        and "tokenizer_config.json" in msg
    )
    with pytest.raises(DataError, match="mask_token '<mask>'"):
        prepare(
            [corpus[0]],
            tmp_path / "out",
            32,
            tokenizer=d,
            eval_fraction=0.0,
            workers=1,
            progress=False,
        )
    assert not (tmp_path / "out").exists()
    with pytest.raises(FinetuneError, match=r"tokenizer: .*mask_token '<mask>'"):
        from tokendrop.finetuning.common import load_finetune_tokenizer

        load_finetune_tokenizer(d)
    # a post-processor that frames texts with other tokens than the declared cls/sep
    other = tmp_path / "eot"
    shutil.copytree(bpe_dir, other)
    tj = json.loads((other / "tokenizer.json").read_text())
    eot = load_tokenizer(bpe_dir).token_to_id("<|endoftext|>")
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {
            "<|endoftext|>": {"id": "<|endoftext|>", "ids": [eot], "tokens": ["<|endoftext|>"]}
        },
    }
    (other / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(
        DataError, match=r"tokenizer\.json: post_processor frames a text as '<\|endoftext\|>'"
    ) as e:
        load_tokenizer(other)
    _one_line(e)


def test_a_model_vocabulary_smaller_than_the_tokenizer(bpe_dir, corpus, tmp_path, capsys):
    n = num_ids(load_tokenizer(bpe_dir))
    small = modern_dir(tmp_path / "small", bpe_dir, n - 5)
    with pytest.raises(
        DataError, match=r"small/config\.json: vocab_size \d+ is smaller than the \d+ ids"
    ) as e:
        prepare(
            [corpus[0]],
            tmp_path / "out",
            32,
            tokenizer=small,
            eval_fraction=0.0,
            workers=1,
            progress=False,
        )
    _one_line(e)
    assert not (tmp_path / "out").exists()
    with pytest.raises(FinetuneError, match="wrong vocab.txt for this model"):
        from tokendrop.finetuning.fit import _load_model_and_tokenizer
        from tokendrop.models.bert.model import BertForSequenceClassification

        _load_model_and_tokenizer(small, BertForSequenceClassification, 32, num_labels=2)
    # data prepared with the tokenizer alone (n ids) against the model: one line each way
    data = tmp_path / "data"
    prepare([corpus[0]], data, 32, tokenizer=bpe_dir, eval_fraction=0.0, workers=1, progress=False)
    larger = modern_dir(tmp_path / "larger", bpe_dir, n + PAD_ROWS)
    for src, want in (
        (small, "embedding rows (config.json vocab_size)"),
        (larger, f"--tokenizer {larger}"),
    ):
        capsys.readouterr()
        code = cli_main(
            [
                "pretrain",
                "--config",
                "continue",
                "--init",
                str(src),
                "--out",
                str(tmp_path / "run"),
                "--set",
                f"data.path={json.dumps(str(data))}",
                *sum((["--set", s] for s in SMALL), []),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and want in err[0], err
        assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("checkpoints/*"))
