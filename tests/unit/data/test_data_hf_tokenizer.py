"""`prepare --tokenizer DIR` and the one tokenizer-loading path give transformers.AutoTokenizer's
ids .  Everything is built here: small WordPiece vocabularies in the
bert-base-uncased layout ([PAD]=0, [unused0..98], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103),
tokenizer directories written as Hugging Face does, generated text; no network, no shared data."""

from __future__ import annotations

import json
import os
import random
import string

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from tokendrop.cli import main  # noqa: E402
from tokendrop.data import (  # noqa: E402
    DataError,
    MLMLoader,
    PreparedData,
    iter_documents,
    load_tokenizer,
    prepare,
)
from tokendrop.data.tokenizer import read_tokenizer_spec  # noqa: E402
from tokendrop.finetuning.common import FinetuneError, load_finetune_tokenizer  # noqa: E402

BERT_SPECIAL_IDS = {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
WORDS = (
    "the of and to in is was for on as with by he she it at from his her that this which are were "
    "be been has have had not but or an they their one two new first time year world city house "
    "music film game team school river water light book word hello token drop train model data "
    "text line play cafe over under after before about between during without within through "
    "people state north south"
).split()
ACCENTED = [
    "café",
    "naïve",
    "Ångström",
    "résumé",
    "Éclair",
    "façade",
    "über",
    "coöperate",
    "cafe\u0301",
    "niño",
    "São",
    "Zürich",
    "ÉTÉ",
    "déjà",
    "Œuvre",
    "straße",
]
CJK = ["東京", "中文字", "日本語", "京都", "한국어", "ひらがな", "カタカナ", "北京市", "文"]
PUNCT = list(".,;:!?'\"()[]{}-/\\@#$%^&*+=<>|~`") + [
    "–",
    "—",
    "…",
    "«",
    "»",
    "¿",
    "¡",
    "’",
    "“",
    "”",
]
CONTROL = [
    "\x01",
    "\x07",
    "\x1b",
    "\x7f",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\ufffd",
    "\t",
    "\x0b",
    "\u00ad",
    "\u0085",
    "\u00a0",
    "\u3000",
    "\u2003",
    "\u2028",
]
OTHER = ["12345", "3.14", "1,000", "😀", "🎉", "n\u0303", "x²", "ﬁ", "Ⅻ", "ﬀ"]


def vocab_tokens(cased: bool) -> list[str]:
    """A few hundred WordPiece entries in bert-base's layout; cased vocabularies have capitalised
    words."""
    toks = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += list(dict.fromkeys(p for p in PUNCT if len(p) == 1))
    letters = list(string.ascii_lowercase) + list("éèüöñçåøßœ") + list(string.digits)
    if cased:
        letters += list(string.ascii_uppercase) + list("ÉÅÖ")
    toks += letters + ["##" + c for c in letters]
    toks += ["東", "京", "中", "文", "日", "本"]
    words = list(WORDS) + [
        "caf",
        "##e",
        "##é",
        "na",
        "##ive",
        "res",
        "##ume",
        "##ing",
        "##ed",
        "##s",
        "##ly",
    ]
    if cased:
        words += [w.capitalize() for w in WORDS[::3]] + ["The", "HELLO", "Paris", "##ER"]
    toks += words
    return list(dict.fromkeys(toks))


def gen_lines(n: int, seed: int) -> list[str]:
    """Lines mixing vocabulary words in random case, accents, CJK, punctuation, control and odd
    whitespace characters, numbers, emoji and very long words (99-130 characters)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 18)):
            k = rng.random()
            if k < 0.40:
                w = rng.choice(WORDS)
                w = rng.choice([w, w, w.capitalize(), w.upper()])
            elif k < 0.50:
                w = "".join(
                    rng.choice(string.ascii_letters + "éüñ") for _ in range(rng.randint(1, 12))
                )
            elif k < 0.58:
                w = rng.choice(ACCENTED)
            elif k < 0.65:
                w = rng.choice(CJK)
            elif k < 0.75:
                w = rng.choice(PUNCT) * rng.randint(1, 2)
            elif k < 0.83:
                w = rng.choice(CONTROL)
            elif k < 0.90:
                w = rng.choice(OTHER)
            elif k < 0.95:  # around BERT's 100-character limit per word
                length = rng.choice([99, 100, 101, 102, 130])
                w = "".join(rng.choice("abcdeé") for _ in range(length))
            else:
                w = rng.choice(WORDS) + rng.choice(PUNCT) + rng.choice(WORDS)
            parts.append(w)
        sep = rng.choice([" ", " ", " ", "", "  "])
        line = sep.join(parts)
        lines.append(line if line.strip() else "x")
    return lines


def write_corpus(path, num_lines: int = 3000, seed: int = 0) -> str:
    lines = gen_lines(num_lines, seed)
    rng = random.Random(seed + 1)
    blocks, i = [], 0
    while i < len(lines):
        k = rng.randint(1, 14)
        blocks.append("\n".join(lines[i : i + k]))
        i += k
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join(blocks) + "\n")
    return str(path)


def write_vocab_dir(d, cased: bool, config: dict | None) -> str:
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab_tokens(cased)) + "\n")
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    return str(d)


def saved_by_transformers(tmp_path, cased: bool, **kwargs) -> str:
    """A tokenizer directory written by ``BertTokenizerFast(...).save_pretrained``
    (tokenizer.json)."""
    src = write_vocab_dir(tmp_path / "src-vocab", cased, {"tokenizer_class": "BertTokenizer"})
    out = tmp_path / "saved"
    transformers.BertTokenizerFast.from_pretrained(src, **kwargs).save_pretrained(str(out))
    assert (out / "tokenizer.json").is_file()
    return str(out)


def auto(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


def expected_unpacked_rows(
    docs_ids: list[list[int]], T: int, cls: int, sep: int, pad: int
) -> np.ndarray:
    rows, L = [], T - 2
    for ids in docs_ids:
        for i in range(0, len(ids), L):
            chunk = ids[i : i + L]
            rows.append([cls, *chunk, sep] + [pad] * (L - len(chunk)))
    return np.asarray(rows, dtype=np.int64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", num_lines=3000)


def _dir_uncased(tmp_path):
    return write_vocab_dir(
        tmp_path / "uncased",
        False,
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 512},
    )


def _dir_cased(tmp_path):
    return write_vocab_dir(
        tmp_path / "cased", True, {"tokenizer_class": "BertTokenizer", "do_lower_case": False}
    )


def _dir_tokenizer_json(tmp_path):  # uncased but keeping accents, as transformers saves it
    return saved_by_transformers(tmp_path, False, do_lower_case=True, strip_accents=False)


@pytest.mark.parametrize(
    "make",
    [_dir_uncased, _dir_cased, _dir_tokenizer_json],
    ids=["vocab-uncased", "vocab-cased", "tokenizer-json"],
)
def test_prepare_tokenizer_gives_autotokenizer_ids(tmp_path, corpus, make):
    d = make(tmp_path)
    ref = auto(d)
    docs = list(iter_documents([corpus]))
    assert len(docs) > 300
    want = [ids for ids in ref(docs, add_special_tokens=False)["input_ids"] if ids]
    flat = [i for ids in want for i in ids]
    # unknown pieces and >100-character words
    assert ref.unk_token_id == 100 and flat.count(100) > 50
    assert len(set(flat)) > 150  # the text exercises most of the vocabulary
    T = 32
    out = tmp_path / "prep"
    s = prepare(
        [corpus], out, T, tokenizer=d, packed=False, eval_fraction=0.0, workers=1, progress=False
    )
    pd = PreparedData.open(out, verify=True)
    assert pd.special_ids == BERT_SPECIAL_IDS
    got = np.asarray(pd.sequences("train"), dtype=np.int64)
    exp = expected_unpacked_rows(want, T, 101, 102, 0)
    assert got.shape == exp.shape and s["documents"] == len(want)
    assert np.array_equal(got, exp)
    # the source's tokenizer files are kept byte for byte; vocab.txt is always there (vocab_hash)
    src_files = [
        n
        for n in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
        if os.path.isfile(os.path.join(d, n))
    ]
    for n in src_files:
        assert (out / n).read_bytes() == open(os.path.join(d, n), "rb").read(), n
    meta = pd.meta
    assert meta["tokenizer"]["type"] == "pretrained" and meta["tokenizer"][
        "path"
    ] == os.path.abspath(d)
    assert meta["tokenizer"]["vocab_file_sha256"] == meta["vocab_hash"] == pd.vocab_hash
    assert meta["special_tokens"] == {
        "pad": "[PAD]",
        "unk": "[UNK]",
        "cls": "[CLS]",
        "sep": "[SEP]",
        "mask": "[MASK]",
    }
    assert meta["lowercase"] is ref.backend_tokenizer.normalizer.lowercase
    assert pd.vocab() == [ref.convert_ids_to_tokens(i) for i in range(len(ref))]
    # loading the prepared directory (what training, fine-tuning and export do) gives the same ids
    again = load_tokenizer(out)
    assert [e.ids for e in again.encode_batch(docs[:200], add_special_tokens=False)] == ref(
        docs[:200], add_special_tokens=False
    )["input_ids"]
    # and transformers reads the prepared directory as the same tokenizer
    assert (
        auto(out)(docs[:200], add_special_tokens=False)["input_ids"]
        == ref(docs[:200], add_special_tokens=False)["input_ids"]
    )


def test_packed_frame_and_loader_use_declared_special_ids(tmp_path, corpus):
    d = _dir_uncased(tmp_path)
    ref = auto(d)
    docs = list(iter_documents([corpus]))
    stream = [i for ids in ref(docs, add_special_tokens=False)["input_ids"] for i in ids]
    T = 64
    prepare([corpus], tmp_path / "p", T, tokenizer=d, eval_fraction=0.0, workers=2, progress=False)
    pd = PreparedData.open(tmp_path / "p")
    rows = np.asarray(pd.sequences("train"), dtype=np.int64)
    assert (rows[:, 0] == 101).all() and (rows[:, -1] == 102).all()
    bodies = rows[:, 1:-1].reshape(-1)
    # no [PAD]/[CLS]/[MASK] inside; [SEP] separates documents
    assert not np.isin(bodies, [0, 101, 103]).any()
    # the documents in order; where a row would end "[SEP] [SEP]" the packer starts one token later
    # (never [SEP][SEP]), so the bodies are the stream less exactly the counted boundary tokens
    got = bodies[bodies != 102].tolist()
    j = 0
    for t in got:  # greedy subsequence match
        while stream[j] != t:
            j += 1
        j += 1
    assert j - len(got) == pd.meta["splits"]["train"]["dropped_boundary_tokens"]
    assert not ((bodies[:-1] == 102) & (bodies[1:] == 102)).any()
    loader = MLMLoader(pd, batch_size=8, num_workers=0, seed=1)
    batch = next(iter(loader))
    inp, pos = batch["input_ids"].numpy(), batch["mlm_positions"].numpy()
    w = batch["mlm_weights"].numpy() > 0
    picked = np.take_along_axis(inp, pos, 1)[w]
    labels = batch["mlm_labels"].numpy()[w]
    assert (picked == 103).mean() > 0.5  # [MASK] by its declared id, not 4
    assert not np.isin(labels, [0, 101, 102, 103]).any()  # frame tokens are never predicted
    # random tokens: no specials
    assert not np.isin(picked[picked != labels], [0, 100, 101, 102] + list(range(1, 100))).any()


def test_tokenizer_json_and_vocab_txt_both_present(tmp_path, corpus):
    d = tmp_path / "both"
    saved = saved_by_transformers(tmp_path, True, do_lower_case=False)
    os.makedirs(d)
    for n in os.listdir(saved):
        (d / n).write_bytes((tmp_path / "saved" / n).read_bytes())
    ref = auto(d)
    (d / "vocab.txt").write_text(
        "\n".join(ref.convert_ids_to_tokens(i) for i in range(len(ref))) + "\n", encoding="utf-8"
    )
    # tokenizer.json says cased; a tokenizer_config.json without do_lower_case means lower-casing to
    # transformers (BertTokenizer's default) -- what AutoTokenizer does, we do
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("do_lower_case")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    ref = auto(d)
    assert ref.backend_tokenizer.normalizer.lowercase is True
    docs = list(iter_documents([corpus]))[:300]
    ours = load_tokenizer(d)
    assert [e.ids for e in ours.encode_batch(docs, add_special_tokens=False)] == ref(
        docs, add_special_tokens=False
    )["input_ids"]
    prepare([corpus], tmp_path / "p", 32, tokenizer=d, eval_fraction=0.0, workers=1, progress=False)
    assert (tmp_path / "p" / "vocab.txt").read_bytes() == (d / "vocab.txt").read_bytes()
    # a vocab.txt that disagrees with tokenizer.json is refused (vocab_hash and export take
    # vocab.txt)
    lines = (d / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[110], lines[111] = lines[111], lines[110]
    (d / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab\.txt: differs from tokenizer\.json at id 110"):
        prepare(
            [corpus], tmp_path / "p2", 32, tokenizer=d, eval_fraction=0.0, workers=1, progress=False
        )
    assert not (tmp_path / "p2").exists()


def test_tokenizer_json_without_config(tmp_path, corpus):
    saved = saved_by_transformers(tmp_path, True, do_lower_case=False)
    d = tmp_path / "only-json"
    d.mkdir()
    (d / "tokenizer.json").write_bytes(open(os.path.join(saved, "tokenizer.json"), "rb").read())
    ref = auto(d)  # transformers loads tokenizer.json as it is
    docs = list(iter_documents([corpus]))[:300]
    assert [e.ids for e in load_tokenizer(d).encode_batch(docs, add_special_tokens=False)] == ref(
        docs, add_special_tokens=False
    )["input_ids"]
    prepare([corpus], tmp_path / "p", 32, tokenizer=d, eval_fraction=0.0, workers=1, progress=False)
    meta = PreparedData.open(tmp_path / "p").meta
    assert sorted(meta["tokenizer"]["generated_files"]) == ["tokenizer_config.json", "vocab.txt"]
    assert meta["lowercase"] is False
    # the written config describes the same tokenizer, for transformers and for us
    assert (
        auto(tmp_path / "p")(docs, add_special_tokens=False)["input_ids"]
        == ref(docs, add_special_tokens=False)["input_ids"]
    )
    # beside a model's config.json, transformers builds BertTokenizer with its defaults
    # (lower-casing)
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": len(ref)}))
    ref = auto(d)
    assert ref.backend_tokenizer.normalizer.lowercase is True
    assert [e.ids for e in load_tokenizer(d).encode_batch(docs, add_special_tokens=False)] == ref(
        docs, add_special_tokens=False
    )["input_ids"]


def test_model_dir_with_vocab_and_config_json_only(tmp_path):
    """An older checkpoint: config.json + vocab.txt, no tokenizer_config.json (cased vocabulary,
    but transformers' BertTokenizer lower-cases by default) -- prepare and fine-tuning follow it."""
    d = write_vocab_dir(tmp_path / "old", True, None)
    (tmp_path / "old" / "config.json").write_text(
        json.dumps({"model_type": "bert", "vocab_size": 400})
    )
    ref = auto(d)
    lines = gen_lines(400, 13)
    assert [e.ids for e in load_finetune_tokenizer(d).encode_batch(lines)] == ref(lines)[
        "input_ids"
    ]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    prepare([corpus], tmp_path / "p", 16, tokenizer=d, eval_fraction=0.0, workers=1, progress=False)
    assert PreparedData.open(tmp_path / "p").meta["lowercase"] is True
    (tmp_path / "old" / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(
        DataError,
        match=r"old/config\.json: model_type 'roberta' does not use a BERT WordPiece tokenizer",
    ):
        load_tokenizer(d)


def test_declared_special_token_names(tmp_path):
    """Special tokens are looked up by the names the tokenizer declares (special_tokens_map.json
    overrides tokenizer_config.json, as in transformers), not assumed to be [PAD]..[MASK] at 0-4."""
    d = write_vocab_dir(
        tmp_path / "named", False, {"tokenizer_class": "BertTokenizer", "mask_token": "[MASK]"}
    )
    v = tmp_path / "named" / "vocab.txt"
    v.write_text(v.read_text(encoding="utf-8").replace("[MASK]\n", "<mask>\n"), encoding="utf-8")
    (tmp_path / "named" / "special_tokens_map.json").write_text(
        json.dumps({"mask_token": "<mask>"})
    )
    ref = auto(d)
    spec = read_tokenizer_spec(d)
    assert spec.special_tokens["mask"] == "<mask>" == ref.mask_token
    tok = load_tokenizer(d)
    for text in ["a <mask> b [MASK] c", "The <mask> of [SEP] and [CLS] x"]:
        assert tok.encode(text).ids == ref(text)["input_ids"]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(gen_lines(200, 3)) + "\n", encoding="utf-8")
    prepare([corpus], tmp_path / "p", 16, tokenizer=d, eval_fraction=0.0, workers=1, progress=False)
    pd = PreparedData.open(tmp_path / "p")
    assert pd.special_ids == BERT_SPECIAL_IDS and pd.meta["special_tokens"]["mask"] == "<mask>"
    assert pd.vocab()[103] == "<mask>"


@pytest.mark.parametrize(
    "make",
    [_dir_uncased, _dir_cased, _dir_tokenizer_json],
    ids=["vocab-uncased", "vocab-cased", "tokenizer-json"],
)
def test_finetune_tokenizer_gives_autotokenizer_ids(tmp_path, make):
    d = make(tmp_path)
    ref = auto(d)
    lines = gen_lines(600, 7) + ["a [MASK] b [SEP] c", "[CLS]x[PAD]", "[UNK] [mask]"]
    rng = random.Random(0)
    pairs = [(a, rng.choice(lines)) for a in lines]
    for tok in (
        load_finetune_tokenizer(d),
        load_finetune_tokenizer(None, d),
        load_finetune_tokenizer(tmp_path / "nope", d),
    ):
        assert [e.ids for e in tok.encode_batch(lines)] == ref(lines)["input_ids"]
        encs = tok.encode_batch(pairs)
        want = ref([a for a, _ in pairs], [b for _, b in pairs])
        assert [e.ids for e in encs] == want["input_ids"]
        assert [e.type_ids for e in encs] == want["token_type_ids"]


def write_bpe_dir(d) -> str:
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    os.makedirs(d, exist_ok=True)
    vocab = {"[UNK]": 0, "a": 1, "b": 2, "ab": 3}
    Tokenizer(BPE(vocab=vocab, merges=[("a", "b")], unk_token="[UNK]")).save(
        os.path.join(d, "tokenizer.json")
    )
    return str(d)


def test_bad_tokenizer_dirs(tmp_path, corpus):
    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(gen_lines(100, 5)) + "\n", encoding="utf-8")

    def run(d, match, **kw):
        out = tmp_path / "out"
        with pytest.raises(DataError, match=match) as e:
            prepare(
                [small],
                out,
                kw.pop("T", 16),
                tokenizer=d,
                eval_fraction=0.0,
                workers=1,
                progress=False,
                **kw,
            )
        assert "\n" not in str(e.value)
        assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith("out.tmp")]
        return str(e.value)

    run(
        tmp_path / "missing",
        r"missing: no such directory; --tokenizer expects a tokenizer directory",
    )
    bpe = write_bpe_dir(tmp_path / "bpe")
    msg = run(bpe, r"tokenizer\.json: a BPE tokenizer, not a BERT WordPiece tokenizer")
    assert msg.startswith(os.path.join(bpe, "tokenizer.json"))
    no_mask = write_vocab_dir(tmp_path / "nomask", False, {"tokenizer_class": "BertTokenizer"})
    v = tmp_path / "nomask" / "vocab.txt"
    v.write_text(
        v.read_text(encoding="utf-8").replace("[MASK]\n", "[unused99]\n"), encoding="utf-8"
    )
    run(no_mask, r"nomask/vocab\.txt: vocabulary lacks the special token\(s\) \[MASK\]")
    (tmp_path / "empty").mkdir()
    run(tmp_path / "empty", r"empty: no tokenizer\.json or vocab\.txt in this directory")
    bare = write_vocab_dir(tmp_path / "bare", False, None)
    run(bare, r"bare/vocab\.txt: no tokenizer_config\.json beside it")
    roberta = write_vocab_dir(tmp_path / "rob", False, {"tokenizer_class": "RobertaTokenizer"})
    run(
        roberta,
        r"rob/tokenizer_config\.json: tokenizer_class 'RobertaTokenizer' is not a BERT "
        r"WordPiece tokenizer",
    )
    bad_json = write_vocab_dir(tmp_path / "badjson", False, None)
    (tmp_path / "badjson" / "tokenizer_config.json").write_text("{not json")
    run(bad_json, r"badjson/tokenizer_config\.json: invalid JSON")
    short = write_vocab_dir(
        tmp_path / "short", False, {"tokenizer_class": "BertTokenizer", "model_max_length": 32}
    )
    run(
        short,
        r"seq_len: T=64 is longer than .*short/tokenizer_config\.json's model_max_length=32",
        T=64,
    )
    good = _dir_uncased(tmp_path)
    run(good, r"lowercase: with a tokenizer directory", lowercase=True)
    run(
        good,
        r"tokenizer: give a tokenizer directory \(--tokenizer\) or a vocab\.txt",
        vocab=os.path.join(good, "vocab.txt"),
    )
    # fine-tuning surfaces the same problems (no fall-back guessing)
    with pytest.raises(FinetuneError, match=r"tokenizer: .*tokenizer\.json: a BPE tokenizer"):
        load_finetune_tokenizer(bpe)
    with pytest.raises(FinetuneError, match=r"lacks the special token\(s\) \[MASK\]"):
        load_finetune_tokenizer(None, no_mask)
    with pytest.raises(FinetuneError, match="no tokenizer found"):
        load_finetune_tokenizer(tmp_path / "nope", tmp_path / "nope2")


def test_cli_prepare_tokenizer(tmp_path, capsys):
    d = _dir_cased(tmp_path)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(gen_lines(300, 9)) + "\n", encoding="utf-8")
    out = tmp_path / "p"
    assert (
        main(
            [
                "prepare",
                "--corpus",
                str(corpus),
                "--out",
                str(out),
                "--seq-len",
                "16",
                "--tokenizer",
                d,
                "--eval-fraction",
                "0",
                "--workers",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    assert PreparedData.open(out).meta["lowercase"] is False
    capsys.readouterr()
    assert (
        main(
            [
                "prepare",
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "q"),
                "--seq-len",
                "16",
                "--tokenizer",
                write_bpe_dir(tmp_path / "bpe"),
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "BPE tokenizer" in err and "\n" not in err
    with pytest.raises(SystemExit):  # argparse: --tokenizer and --vocab are mutually exclusive
        main(
            [
                "prepare",
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "r"),
                "--seq-len",
                "16",
                "--tokenizer",
                d,
                "--vocab",
                os.path.join(d, "vocab.txt"),
            ]
        )
    assert (
        main(
            [
                "prepare",
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "s"),
                "--seq-len",
                "16",
                "--tokenizer",
                d,
                "--no-lowercase",
                "--quiet",
            ]
        )
        == 2
    )
    assert "tokenizer_config.json decides the casing" in capsys.readouterr().err
