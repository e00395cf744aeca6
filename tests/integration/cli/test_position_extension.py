"""Continued pretraining at T = 2,048 from a 512-position checkpoint (docs/design.md §2.8).

* ModernBERT (rotary positions): ``model.max_position_embeddings = 2048`` and a larger
  ``model.global_rope_theta`` (160,000, as ModernBERT's long-context phase) extend the source; the
  run trains at T = 2,048, its export loads in ``transformers.ModernBertForMaskedLM`` with the new
  base, and gives our model's logits at positions far beyond 512.
* BERT (512 learned position embeddings): asked for T = 2,048, ``tokendrop pretrain`` exits 2 with
  one line, before anything is written.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from toydata import task_vocab_tokens, write_checkpoint, write_vocab  # noqa: E402

from tokendrop.cli import main  # noqa: E402
from tokendrop.data import prepare  # noqa: E402
from tokendrop.data.tokenizer import SPECIAL_IDS  # noqa: E402
from tokendrop.finetuning.task_corpus import write_task_corpus
from tokendrop.models.hf import copy_tokenizer  # noqa: E402
from tokendrop.models.modernbert.model import ModernBertForMaskedLM  # noqa: E402
from tokendrop.models.source import load_pretrained  # noqa: E402

T = 2048
V = len(task_vocab_tokens())
PAD, SEP, CLS = SPECIAL_IDS["pad"], SPECIAL_IDS["sep"], SPECIAL_IDS["cls"]


@pytest.fixture(scope="module")
def data_2048(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    vocab = write_vocab(root / "vocab.txt")
    corpus = write_task_corpus(root / "corpus.txt", num_docs=400)
    out = root / "data-2048"
    prepare(
        [corpus],
        out,
        seq_len=T,
        vocab=vocab,
        eval_fraction=0.2,
        workers=1,
        max_position_embeddings=T,
        progress=False,
    )
    return out, vocab


def _modern_source(d, vocab):
    """A ModernBERT checkpoint with 512 positions and 10,000 as both rotary bases (ModernBERT's
    short phase)."""
    cfg = transformers.ModernBertConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=2,
        max_position_embeddings=512,
        local_attention=16,
        pad_token_id=PAD,
        sep_token_id=SEP,
        eos_token_id=SEP,
        cls_token_id=CLS,
        bos_token_id=CLS,
        global_rope_theta=10000.0,
        local_rope_theta=10000.0,
    )
    torch.manual_seed(0)
    m = transformers.ModernBertForMaskedLM(cfg)
    with torch.no_grad():  # peaked attention, so that positions (and their rotary base) matter
        for layer in m.model.layers:
            layer.attn.Wqkv.weight.mul_(25.0)
    m.save_pretrained(d)
    copy_tokenizer(vocab, d)
    saved = json.loads((d / "config.json").read_text())
    assert saved["max_position_embeddings"] == 512
    return d


def _run(argv, capsys):
    capsys.readouterr()  # what came before (transformers' progress bars)
    code = main(argv)
    return code, capsys.readouterr()


def _pretrain_args(data, out, init, *sets):
    cfg = out.parent / "continue-2048.toml"  # a config that names no shape: it comes from --init
    cfg.write_text(
        f'[data]\npath = "{data}"\nnum_workers = 0\n\n[train]\nsteps = 2\nbatch_size = '
        "2\nwarmup_steps = 0\n"
        "eval_every = 2\neval_batches = 1\nckpt_every = 2\nlog_every = 1\nthreads = 1\n"
    )
    return [
        "pretrain",
        "--config",
        str(cfg),
        "--init",
        str(init),
        "--out",
        str(out),
        "--quiet",
        *[x for s in sets for x in ("--set", s)],
    ]


def test_modernbert_rope_extension_round_trips_to_transformers(data_2048, tmp_path, capsys):
    data, vocab = data_2048
    src = _modern_source(tmp_path / "src", vocab)
    run, export = tmp_path / "run", tmp_path / "export"
    # without the extension: one line saying how to extend
    code, out = _run(_pretrain_args(data, run, src), capsys)
    assert code == 2 and not run.exists()
    err = out.err.strip()
    assert len(err.splitlines()) == 1 and "T=2048 exceeds model.max_position_embeddings=512" in err
    assert "model.max_position_embeddings = 2048" in err and "model.global_rope_theta" in err
    # with it: trains at T = 2048 with token dropping, exports with the new base
    code, out = _run(
        _pretrain_args(
            data,
            run,
            src,
            "model.max_position_embeddings=2048",
            "model.global_rope_theta=160000",
            "drop.method=cumulative",
            "drop.rate=0.5",
        ),
        capsys,
    )
    assert code == 0, out.err
    assert main(["export", str(run), str(export)]) == 0
    cj = json.loads((export / "config.json").read_text())
    assert cj["max_position_embeddings"] == 2048
    assert cj["rope_parameters"]["full_attention"]["rope_theta"] == 160000.0
    # not given: the source's
    assert cj["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0
    back = transformers.AutoModelForMaskedLM.from_pretrained(
        export, attn_implementation="eager"
    ).eval()
    assert type(back).__name__ == "ModernBertForMaskedLM"
    ours, info = load_pretrained(run, ModernBertForMaskedLM)
    assert (
        info["model_config"].global_rope_theta == 160000.0
        and info["model_config"].max_position_embeddings == 2048
    )
    ours.eval().document_attention = False  # transformers' eager attention spans the whole row
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(len(SPECIAL_IDS), V, (1, T), generator=g)
    ids[0, 0], ids[0, -1] = CLS, SEP
    with torch.no_grad():
        theirs = back(input_ids=ids).logits
        mine = ours(ids)
    torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
    # the base matters at these positions: the source's 10,000 gives other logits
    cj["rope_parameters"]["full_attention"]["rope_theta"] = 10000.0
    (export / "config.json").write_text(json.dumps(cj))
    old = transformers.AutoModelForMaskedLM.from_pretrained(
        export, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        assert (old(input_ids=ids).logits - theirs).abs().max() > 1e-3


def test_bert_with_512_positions_at_2048_is_one_line_exit_2(data_2048, tmp_path, capsys):
    data, vocab = data_2048
    src = write_checkpoint(
        tmp_path / "bert",
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        vocab=vocab,
    )
    run = tmp_path / "run"
    for extra in ([], ["model.max_position_embeddings=2048"]):
        code, out = _run(_pretrain_args(data, run, src, *extra), capsys)
        err = out.err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith("error: ") and "512 learned position embeddings" in err
        assert "tokendrop does not extend learned positions" in err
        assert not run.exists()  # nothing written
