"""Corpus readers and the wiki-markup cleaner."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import re

import pytest
from synthetic import SHARED_DATA

from tokendrop.data import DataError, clean_wikitext, iter_documents, resolve_corpus
from tokendrop.data.corpus import read_wiki_pages

SHARED = str(SHARED_DATA / "corpus")
WIKI_DUMP = os.path.join(SHARED, "enwiki-sample-pages-articles.xml.bz2")


# ---------------------------------------------------------------------------------------------
# BERT text, JSONL, directories, globs


def test_bert_text_blocks_and_gzip(tmp_path):
    text = "First line.\nSecond line.\n\n\nDoc two, only line.\n  \nDoc three.\r\nwith CRLF\n"
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write(text)
    # a gzip file without .gz is recognised by its magic bytes
    (tmp_path / "c.txt").write_bytes(gzip.compress(text.encode()))
    want = ["First line.\nSecond line.", "Doc two, only line.", "Doc three.\nwith CRLF"]
    for name in ("a.txt", "b.txt.gz", "c.txt"):
        assert list(iter_documents(tmp_path / name)) == want


def test_jsonl_text_field(tmp_path):
    rows = [{"id": 1, "body": "Alpha beta.\n\nGamma."}, {"id": 2, "body": "Delta."}]
    p = tmp_path / "x.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    assert list(iter_documents(p, text_field="body")) == ["Alpha beta.\nGamma.", "Delta."]
    with pytest.raises(DataError) as e:
        list(iter_documents(p))
    assert str(e.value) == (
        f"{p}: line 1: no field 'text' (its fields: id, body); name the field that holds the "
        "text with text_field=FIELD"
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(
        DataError, match=r"bad\.jsonl: line 2: field 'text' is int; expected a string"
    ):
        list(iter_documents(bad))
    bad.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2: invalid JSON"):
        list(iter_documents(bad))


def test_directories_and_globs(tmp_path):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "b.txt").write_text("B doc.\n", encoding="utf-8")
    (d / "a.txt").write_text("A doc.\n", encoding="utf-8")
    (d / "sub" / "c.jsonl").write_text('{"text": "C doc."}\n', encoding="utf-8")
    (d / "notes.md").write_text("ignored\n", encoding="utf-8")
    (d / ".hidden.txt").write_text("ignored\n", encoding="utf-8")
    assert list(iter_documents(d)) == ["A doc.", "B doc.", "C doc."]
    # files of other formats are left out, and said so (not silently)
    (d / "sub" / "table.csv").write_text("a,b\n", encoding="utf-8")
    (d / "sub" / "tool.py").write_text("x = 1\n", encoding="utf-8")
    (d / "README").write_text("no extension\n", encoding="utf-8")
    notes: list[str] = []
    assert len(resolve_corpus([d], notes=notes)) == 3
    assert notes == [
        f"{d}: 4 file(s) not read as corpus, by extension: (no extension) 1, .csv 1, .md 1, .py 1 "
        f"(e.g. {d / 'README'}); name a file on the command line to read it as plain text"
    ]
    for f in ("table.csv", "tool.py"):
        (d / "sub" / f).unlink()
    (d / "README").unlink()
    assert [os.path.basename(s.path) for s in resolve_corpus([str(d / "*.txt")])] == [
        "a.txt",
        "b.txt",
    ]
    assert [os.path.basename(s.path) for s in resolve_corpus([str(d / "**" / "*.jsonl")])] == [
        "c.jsonl"
    ]
    # the same file twice is read once
    assert len(resolve_corpus([d / "a.txt", str(d / "a.txt")])) == 1
    with pytest.raises(DataError, match="glob pattern matches no files"):
        resolve_corpus([str(d / "*.nothing")])
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match="directory contains no corpus files"):
        resolve_corpus([tmp_path / "empty_dir"])


@pytest.mark.parametrize(
    "name,content,fix",
    [
        (
            "dev-v1.1.json",
            '{"data": [{"title": "x", "paragraphs": []}]}',
            "give JSON Lines instead",
        ),
        ("table.csv", "text,label\nhello world,1\n", "write its text column to .txt or .jsonl"),
        ("table.tsv.gz", None, "a TSV table would be read as plain text"),
        ("mac.txt", "one line\rtwo lines\rthree\r", "lines end in a lone CR"),
    ],
)
def test_files_that_are_not_plain_text_are_refused_with_their_fix(tmp_path, name, content, fix):
    """A SQuAD JSON, a CSV or TSV table given as a corpus would be read as one document of syntax,
    a CR-only file as one line: each is refused in one line naming the file and what to give."""
    p = tmp_path / name
    if content is None:
        p.write_bytes(gzip.compress(b"text\tlabel\nhello\t1\n"))
    else:
        p.write_bytes(content.encode())
    with pytest.raises(DataError) as e:
        resolve_corpus([p])
    assert str(e.value).startswith(f"{p}: ") and fix in str(e.value) and "\n" not in str(e.value)
    # CRLF is ordinary text
    crlf = tmp_path / "dos.txt"
    crlf.write_bytes(b"one line\r\ntwo lines\r\n\r\nthird doc\r\n")
    assert list(iter_documents(crlf)) == ["one line\ntwo lines", "third doc"]


def test_reader_errors(tmp_path):
    with pytest.raises(DataError, match=r"nope\.txt: no such file or directory"):
        resolve_corpus([tmp_path / "nope.txt"])
    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    with pytest.raises(DataError, match="binary file"):
        resolve_corpus([binary])
    # invalid UTF-8 late in the file (beyond the sniffed head): reported with its line number
    late = tmp_path / "late.txt"
    late.write_bytes(("ok line\n" * 10000).encode() + b"caf\xe9 latin-1\n")
    resolve_corpus([late])
    with pytest.raises(DataError, match=r"late\.txt: line 10001: invalid UTF-8"):
        list(iter_documents(late))
    early = tmp_path / "early.txt"
    early.write_bytes(b"caf\xe9 au lait\n" * 10)
    with pytest.raises(DataError, match=r"early\.txt: invalid UTF-8"):
        resolve_corpus([early])
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(b"some text\n" * 1000)[:-30])
    with pytest.raises(DataError, match=r"broken\.txt\.gz"):
        list(iter_documents(broken))


def test_hf_local_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    from datasets.table import InMemoryTable

    # an explicit fingerprint skips datasets' dill hashing (fragile across pyarrow versions)
    ds = datasets.Dataset(
        InMemoryTable.from_pydict({"content": ["One doc.\n\nParagraph two.", "Two."]}),
        fingerprint="t",
    )
    ds.save_to_disk(str(tmp_path / "ds"))
    want = ["One doc.\nParagraph two.", "Two."]
    assert list(iter_documents([f"hf:{tmp_path / 'ds'}"], text_field="content")) == want
    datasets.DatasetDict({"train": ds, "validation": ds}).save_to_disk(str(tmp_path / "dd"))
    assert list(iter_documents([f"hf:{tmp_path / 'dd'}@validation"], text_field="content")) == want
    with pytest.raises(DataError, match="no split 'test'"):
        list(iter_documents([f"hf:{tmp_path / 'dd'}@test"], text_field="content"))
    with pytest.raises(DataError, match="no column 'text'"):
        list(iter_documents([f"hf:{tmp_path / 'ds'}"]))
    from toydata import write_toy_vocab

    from tokendrop.data import PreparedData, prepare

    prepare(
        [f"hf:{tmp_path / 'ds'}"],
        tmp_path / "o",
        8,
        vocab=write_toy_vocab(tmp_path / "v.txt"),
        text_field="content",
        eval_fraction=0,
        workers=1,
        progress=False,
    )
    assert PreparedData.open(tmp_path / "o").meta["sources"][0]["format"] == "hf"


def test_hf_without_datasets_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(DataError, match="'datasets' package is not installed"):
        list(iter_documents(["hf:wikitext:wikitext-2-raw-v1@train"]))


# ---------------------------------------------------------------------------------------------
# wiki markup (crafted snippets in real dump syntax)


@pytest.mark.parametrize(
    "wikitext, expected",
    [
        # nested templates, including a multi-line infobox with templates inside its parameters
        (
            "{{Infobox person\n| name = {{nowrap|A B}}\n| born = {{birth date|1900|1|1}}\n}}\nFoo "
            "{{a|{{b|{{c}}}}}} bar.",
            "Foo bar.",
        ),
        # references: paired (containing templates), self-closing, and with attributes
        (
            'Text.<ref name="x">{{cite web |url=http://x.org |title=T}}</ref> More<ref name="x" /> '
            "end.<ref>plain</ref>",
            "Text. More end.",
        ),
        # links: piped, plain, pipe trick, suffixes, section links
        (
            "[[political philosophy|Political]] [[anarchy]] [[Paris, Texas|]] [[cat]]s [[History "
            "of France#Middle Ages|medieval]]",
            "Political anarchy Paris cats medieval",
        ),
        # files with nested links and external links in the caption; categories; interlanguage links
        (
            "[[File:Flag.svg|thumb|right|A [[flag]] with [http://x.org a link] [1900]]]Prose "
            "starts.\n[[Image:X.png|200px]]\n[[Category:Anarchism| ]]\n[[de:Anarchismus]]\n"
            "[[:Category:Visible|visible]] text.",
            "Prose starts.\nvisible text.",
        ),
        # tables (nested), table debris
        (
            'Before.\n{| class="wikitable"\n|-\n! H1 !! H2\n|-\n| a || b\n|-\n|\n{|\n| '
            "inner\n|}\n|}\nAfter.",
            "Before.\nAfter.",
        ),
        # comments, tags, bold/italic, entities, magic words
        (
            "A <!-- hidden\nover lines --> B. '''Bold''' and ''italic'' "
            "H<sub>2</sub>O&nbsp;&amp;&ndash;x<br/>y __NOTOC__",
            "A B. Bold and italic H2O &–x y",
        ),
        # headings removed, list markers removed (text kept), non-prose sections dropped
        (
            "Intro.\n== History ==\n* item one\n# item two\n: indented\n; term\nText.\n== See also "
            "==\n* [[Other]]\n"
            "=== Sub ===\nstill skipped\n== References ==\n{{reflist}}\n== Legacy ==\nKept.",
            "Intro.\nitem one\nitem two\nindented\nterm\nText.\nKept.",
        ),
        # inline templates that carry text, and empty parentheses left by removed ones
        (
            "It is {{convert|5|km|mi}} long and {{lang|fr|très}} fine ({{IPA|x}}) "
            "here{{citation needed}}.",
            "It is 5 km long and très fine here.",
        ),
        # external links: labelled, bare
        (
            "See [http://example.com Example site] and [https://x.org] or http://bare.url/x now.",
            "See Example site and or now.",
        ),
        # unclosed template / stray closers do not eat the article
        ("A {{unclosed B.\nNext line ok.", "A unclosed B.\nNext line ok."),
        ("Stray }} closer and {{tpl}}.", "Stray closer and."),
        ("#REDIRECT [[Elsewhere]]", ""),
        ("<math>x^2</math> Equation.<gallery>\nFile:A.jpg|cap\n</gallery>", "Equation."),
    ],
)
def test_clean_wikitext(wikitext, expected):
    assert clean_wikitext(wikitext) == expected


_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo><sitename>Wikipedia</sitename></siteinfo>
  <page><title>Article</title><ns>0</ns><id>1</id>
    <revision><id>1</id><text xml:space="preserve">'''Article''' is a [[thing|Thing]].&lt;ref&gt;{{cite}}&lt;/ref&gt;

Second &amp;nbsp;paragraph.</text></revision></page>
  <page><title>Redirect</title><ns>0</ns><id>2</id><redirect title="Article" />
    <revision><id>2</id><text xml:space="preserve">#REDIRECT [[Article]]</text></revision></page>
  <page><title>Wikipedia:Policy</title><ns>4</ns><id>3</id>
    <revision><id>3</id><text xml:space="preserve">Project page.</text></revision></page>
  <page><title>Sneaky</title><ns>0</ns><id>4</id>
    <revision><id>4</id><text xml:space="preserve">#redirect [[Article]]</text></revision></page>
  <page><title>Talk:Article</title><ns>1</ns><id>5</id>
    <revision><id>5</id><text xml:space="preserve">Talk.</text></revision></page>
  <page><title>Second</title><ns>0</ns><id>6</id>
    <revision><id>6</id><text xml:space="preserve">Another [[article]].</text></revision></page>
</mediawiki>
"""  # noqa: E501 (a dump as MediaWiki writes it)


def test_wiki_dump_reader_skips_redirects_and_namespaces(tmp_path):
    p = tmp_path / "dump.xml.bz2"
    p.write_bytes(bz2.compress(_DUMP.encode()))
    assert [t for t, _ in read_wiki_pages(str(p))] == ["Article", "Second"]
    assert list(iter_documents(p)) == ["Article is a Thing.\nSecond paragraph.", "Another article."]
    bad = tmp_path / "bad.xml"
    bad.write_text(_DUMP[: len(_DUMP) // 2], encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.xml: invalid XML"):
        list(iter_documents(bad))


@pytest.mark.skipif(not os.path.exists(WIKI_DUMP), reason="real dump sample not present")
def test_real_wikipedia_dump_sample():
    docs = list(iter_documents(WIKI_DUMP))
    # 206 pages = 106 articles + 100 redirects
    assert 100 <= len(docs) <= 106
    text = "\n".join(docs)
    for residue in (
        "{{",
        "}}",
        "[[",
        "]]",
        "<ref",
        "</",
        "{|",
        "|}",
        "&nbsp;",
        "&amp;",
        "'''",
        "==",
        "http://",
        "[http",
    ):
        assert residue not in text, residue
    assert not re.search(r"(?m)^\s*[*#|!]", text)  # no list markers / table rows
    assert not re.search(r"(?mi)^(?:File|Image|Category):", text)
    words = text.split()
    assert len(words) > 300_000  # prose survives
    # mostly real sentences: >90% of the text is in lines that end like a sentence (the rest: list
    # items)
    lines = [ln for d in docs for ln in d.split("\n")]
    prose = sum(len(ln) for ln in lines if ln.endswith((".", '"', ")", ":", "!", "?")))
    assert prose / sum(len(ln) for ln in lines) > 0.9
    assert docs[0].startswith(
        "Anarchism is a political philosophy that advocates self-governed societies"
    )


def test_a_missing_jsonl_field_names_the_flag_on_the_command_line(tmp_path, capsys):
    from tokendrop.cli import main

    (tmp_path / "x.jsonl").write_text(json.dumps({"body": "Alpha beta."}) + "\n")
    argv = ["prepare", "--corpus", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "d")]
    assert main([*argv, "--seq-len", "16", "--vocab-size", "100", "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "no field 'text' (its fields: body); name the field that holds the text with "
        "--text-field FIELD"
    ), err


# ---------------------------------------------------------------------------------------------
# columnar inputs


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_dictionary_encoded_text_column_is_read_as_its_strings(tmp_path, fmt):
    """pandas writes a categorical column dictionary-encoded: the strings are read, in row order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = ["Alpha beta.", "Gamma delta.", "Alpha beta.", "Epsilon."] * 40
    p = tmp_path / f"cat.{fmt}"

    def write(col):
        t = pa.table({"id": list(range(len(col))), "text": col})
        if fmt == "parquet":
            pq.write_table(t, p, row_group_size=50)
        else:
            with pa.ipc.new_file(p, t.schema) as w:
                w.write_table(t, max_chunksize=50)

    write(pa.array(docs).dictionary_encode())
    assert list(iter_documents([p])) == docs
    write(pa.array(docs, pa.large_string()).dictionary_encode())
    assert list(iter_documents([p])) == docs
    write(pa.array(docs[:3] + [None]).dictionary_encode())
    with pytest.raises(DataError, match=r"row 3: column 'text' is null"):
        list(iter_documents([p]))
    write(pa.array([1, 2, 1]).dictionary_encode())  # categories that are no text stay refused
    with pytest.raises(DataError, match=r"column 'text' is .*int64.*not a string column"):
        list(iter_documents([p]))
