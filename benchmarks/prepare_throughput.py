"""`tokendrop prepare` next to the recipe users would otherwise run, on the same corpus, side by
side.

    python benchmarks/prepare_throughput.py   # >= 1 GB generated JSONL corpus, N = 1, 2
    python benchmarks/prepare_throughput.py --size-mb 40 --out /tmp/pt   # a quick check of it

The recipe: Hugging Face ``datasets`` ``load_dataset("json")`` + ``map(tokenize, batched=True,
num_proc=N)`` with ``BertTokenizerFast`` built from the same ``vocab.txt`` (lower-cased, as ours),
then the ``group_texts`` packing of transformers' ``examples/pytorch/language-modeling/run_mlm.py``
(copied below, :func:`hf_recipe`), also ``num_proc=N``.  Ours: :func:`tokendrop.data.prepare`
with ``workers=N`` (T=512 packed, 1% held out).  Each arm runs in a fresh subprocess, one after
the other: ours N=1, HF N=1, ours N=2, HF N=2 (``--workers``).

Measured per arm: wall time of the preparation inside the subprocess (imports excluded; HF: load +
both maps, its Arrow cache included, as ``run_mlm.py`` runs them), tokens/s = the corpus's document
tokens (no [CLS]/[SEP]; the same number for both arms, checked) / that wall time, and peak memory of
the whole process tree (the subprocess and all its descendants): the sum of their PSS
(``/proc/PID/smaps_rollup``; proportional set size, so pages that forked workers share are counted
once; RSS where PSS is not available), sampled every 0.2 s until the timed part ends.  Memory-mapped
file pages a process touched count in its PSS, for both arms.

The corpus (``--corpus-dir``, reused when present): JSONL, one document per line.  Documents come
from ``/work/shared/data/corpus/mixed-english.txt.gz`` (real English: documentation, dictionaries,
literature, speeches, Wikipedia), repeated in a new shuffled order each pass until ``--size-mb``;
without that file, Zipf-distributed pseudo-English words in sentences of 5-30 words.  The
vocabulary: ``/work/shared/data/vocab/bert-base-uncased-vocab.txt``, or one trained on the corpus
(30522 pieces).

Writes ``--out``.json and .md (default ``benchmarks/results/prepare_throughput``): command, hardware
(nproc, CPU model), load average before and after, versions, one row per arm, and the ratios ours/HF
at the same N (tokens/s, peak memory) and ours N=2 / N=1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import chain

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared/data"
SHARED_CORPUS = os.path.join(SHARED, "corpus", "mixed-english.txt.gz")
SHARED_VOCAB = os.path.join(SHARED, "vocab", "bert-base-uncased-vocab.txt")
SEQ_LEN = 512


# ----------------------------------------------------------------------------------------------
# the corpus


def _shared_documents() -> list[str]:
    with gzip.open(SHARED_CORPUS, "rt", encoding="utf-8") as f:
        return [d.strip() for d in f.read().split("\n\n") if d.strip()]


def _pseudo_english(rng: random.Random, n_docs: int) -> list[str]:
    syll = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ea", "ou")]
    words = list(
        dict.fromkeys(
            "".join(rng.choice(syll) for _ in range(rng.choice((1, 1, 2, 2, 3, 4))))
            for _ in range(60000)
        )
    )
    weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf
    docs = []
    for _ in range(n_docs):
        sents = []
        for _ in range(rng.randint(3, 40)):
            ws = rng.choices(words, weights, k=rng.randint(5, 30))
            sents.append(" ".join(ws).capitalize() + rng.choice(".....?!"))
        docs.append(" ".join(sents))
    return docs


def ensure_corpus(directory: str, size_mb: float) -> tuple[str, str, int]:
    """(corpus.jsonl, vocab.txt, bytes) in ``directory``, generated once per size."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"corpus-{size_mb:g}MB.jsonl")
    vocab = SHARED_VOCAB if os.path.isfile(SHARED_VOCAB) else os.path.join(directory, "vocab.txt")
    if not os.path.isfile(path):
        rng = random.Random(0)
        docs = _shared_documents() if os.path.isfile(SHARED_CORPUS) else _pseudo_english(rng, 20000)
        target, written = int(size_mb * 1e6), 0
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            while written < target:
                rng.shuffle(docs)
                for d in docs:
                    line = json.dumps({"text": d}, ensure_ascii=False) + "\n"
                    f.write(line)
                    written += len(line.encode("utf-8"))
                    if written >= target:
                        break
        os.replace(tmp, path)
    if not os.path.isfile(vocab):
        from tokendrop.data import train_tokenizer
        from tokendrop.data.tokenizer import vocab_list

        with open(path, encoding="utf-8") as f:
            sample = [json.loads(line)["text"] for _, line in zip(range(20000), f)]
        tok = train_tokenizer(iter(sample), 30522, lowercase=True)
        with open(vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(vocab_list(tok)) + "\n")
    return path, vocab, os.path.getsize(path)


# ----------------------------------------------------------------------------------------------
# the arms (each in its own subprocess)


def ours(corpus: str, vocab: str, workers: int, work: str) -> dict:
    from tokendrop.data import prepare

    t0 = time.perf_counter()
    s = prepare(
        [corpus],
        os.path.join(work, "prepared"),
        SEQ_LEN,
        vocab=vocab,
        workers=workers,
        progress=False,
    )
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "document_tokens": s["tokens"],
        "documents": s["documents"],
        "sequences": s["train_sequences"] + s["eval_sequences"],
    }


def hf_recipe(corpus: str, vocab: str, workers: int, work: str, done) -> dict:
    """transformers' examples/pytorch/language-modeling/run_mlm.py (not --line_by_line): its
    ``tokenize_function`` and ``group_texts``, with its defaults (map batch size 1000,
    ``return_special_tokens_mask=True``, max_seq_length 512)."""
    from datasets import load_dataset
    from transformers import BertTokenizerFast

    # from a directory holding the vocab.txt (BertTokenizerFast(vocab_file=...) silently builds an
    # empty vocabulary in transformers 5, every token [UNK]; from_pretrained works in 4.x and 5.x)
    tok_dir = os.path.join(work, "tokenizer")
    os.makedirs(tok_dir)
    shutil.copyfile(vocab, os.path.join(tok_dir, "vocab.txt"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
    tokenizer = BertTokenizerFast.from_pretrained(tok_dir)
    max_seq_length = SEQ_LEN
    t0 = time.perf_counter()
    raw_datasets = load_dataset(
        "json", data_files={"train": corpus}, cache_dir=os.path.join(work, "cache")
    )
    column_names = raw_datasets["train"].column_names
    text_column_name = "text" if "text" in column_names else column_names[0]

    # run_mlm.py: "we tokenize every text, then concatenate them together before splitting them in
    # smaller parts. We use `return_special_tokens_mask=True` because
    # DataCollatorForLanguageModeling (see below) is more efficient when it receives the
    # `special_tokens_mask`."
    def tokenize_function(examples):
        return tokenizer(examples[text_column_name], return_special_tokens_mask=True)

    tokenized_datasets = raw_datasets.map(
        tokenize_function,
        batched=True,
        num_proc=workers,
        remove_columns=column_names,
        desc="Running tokenizer on every text in dataset",
    )

    # run_mlm.py: "Main data processing function that will concatenate all texts from our dataset
    # and generate chunks of max_seq_length."
    def group_texts(examples):
        # Concatenate all texts.
        concatenated_examples = {k: list(chain(*examples[k])) for k in examples.keys()}
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        # We drop the small remainder, and if the total_length < max_seq_length  we exclude this
        # batch and return an empty dict. We could add padding if the model supported it instead of
        # this drop, you can customize this part to your needs.
        total_length = (total_length // max_seq_length) * max_seq_length
        # Split by chunks of max_len.
        result = {
            k: [t[i : i + max_seq_length] for i in range(0, total_length, max_seq_length)]
            for k, t in concatenated_examples.items()
        }
        return result

    # kept for the token count below (run_mlm.py reassigns the name)
    per_document = tokenized_datasets
    tokenized_datasets = tokenized_datasets.map(
        group_texts,
        batched=True,
        num_proc=workers,
        desc=f"Grouping texts in chunks of {max_seq_length}",
    )
    wall = time.perf_counter() - t0
    done()
    import pyarrow.compute as pc

    # the same token count as ours (a check that both tokenize alike): input_ids minus [CLS]/[SEP]
    # per document
    with_special = 0
    for batch in per_document["train"].data.column("input_ids").chunks:
        with_special += int(pc.sum(pc.list_value_length(batch)).as_py() or 0)
    n_docs = raw_datasets["train"].num_rows
    return {
        "wall_s": wall,
        "document_tokens": with_special - 2 * n_docs,
        "documents": n_docs,
        "sequences": tokenized_datasets["train"].num_rows,
    }


def _arm_main(a: argparse.Namespace) -> None:
    def done() -> None:
        open(a.done_file, "w").close()

    work = tempfile.mkdtemp(prefix=f"prepare-bench-{a.arm}-", dir=a.tmp)
    n = a.workers[0]
    try:
        res = (
            ours(a.corpus, a.vocab, n, work)
            if a.arm == "ours"
            else hf_recipe(a.corpus, a.vocab, n, work, done)
        )
    finally:
        done()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + json.dumps(res), flush=True)


# ----------------------------------------------------------------------------------------------
# memory of a process tree, from /proc


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    return kids


def _pss_kb(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]), "pss"
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]), "rss"
    except OSError:
        pass
    return 0, "pss"  # gone meanwhile


def tree_memory_mb(root: int) -> tuple[float, str]:
    kids = _children()
    todo, total, kind = [root], 0, "pss"
    while todo:
        pid = todo.pop()
        kb, k = _pss_kb(pid)
        total += kb
        kind = kind if k == "pss" else "rss"
        todo += kids.get(pid, [])
    return total / 1024, kind


def run_arm(arm: str, workers: int, corpus: str, vocab: str, tmp: str) -> dict:
    done_file = os.path.join(tmp, f"{arm}-{workers}.done")
    if os.path.exists(done_file):
        os.remove(done_file)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--arm",
        arm,
        "--workers",
        str(workers),
        "--corpus",
        corpus,
        "--vocab",
        vocab,
        "--tmp",
        tmp,
        "--done-file",
        done_file,
    ]
    env = dict(
        os.environ,
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=os.path.join(REPO, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, kind = 0.0, "pss"
    while p.poll() is None and not os.path.exists(done_file):
        mb, kind = tree_memory_mb(p.pid)
        peak = max(peak, mb)
        time.sleep(0.2)
    out, err = p.communicate()
    total = time.perf_counter() - t0
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise SystemExit(f"{arm} N={workers} failed (exit {p.returncode}):\n{err[-3000:]}")
    res = json.loads(line[len("RESULT ") :])
    res.update(
        arm=arm,
        workers=workers,
        peak_memory_mb=round(peak, 1),
        memory_measure=kind,
        process_wall_s=round(total, 2),
    )
    return res


# ----------------------------------------------------------------------------------------------
# report


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("tokendrop", "tokenizers", "transformers", "datasets", "pyarrow", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def report(rows: list[dict], meta: dict) -> tuple[dict, str]:
    tokens = next((r["document_tokens"] for r in rows if r["arm"] == "ours"), None)
    for r in rows:
        r["tokens_per_s"] = round(tokens / r["wall_s"]) if tokens else None
        r["wall_s"] = round(r["wall_s"], 2)
    by = {(r["arm"], r["workers"]): r for r in rows}
    ratios = {}
    for (arm, n), r in sorted(by.items()):
        if arm == "ours" and ("hf", n) in by:
            h = by[("hf", n)]
            ratios[f"N={n} ours/HF tokens/s"] = round(r["tokens_per_s"] / h["tokens_per_s"], 3)
            ratios[f"N={n} ours/HF peak memory"] = round(
                r["peak_memory_mb"] / h["peak_memory_mb"], 3
            )
    ns = sorted(n for a, n in by if a == "ours")
    if len(ns) > 1:
        ratios[f"ours N={ns[-1]} / N={ns[0]} tokens/s"] = round(
            by[("ours", ns[-1])]["tokens_per_s"] / by[("ours", ns[0])]["tokens_per_s"], 3
        )
    data = {
        **meta,
        "rows": rows,
        "ratios": ratios,
        "goals": {
            "ours/HF tokens/s at the same N": ">= 1.0",
            "ours/HF peak memory": "<= 0.5",
            "ours N=2 / N=1 tokens/s": ">= 1.7",
        },
    }
    md = [
        "# prepare throughput: tokendrop vs the datasets + run_mlm.py recipe",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {meta['nproc']} CPUs ({meta['cpu']}), load average before "
        f"{meta['load_before']}, after "
        f"{meta['load_after']}. Corpus: {meta['corpus_mb']:.0f} MB JSONL "
        f"({meta['corpus_source']}), "
        f"{tokens:,} document tokens; T={SEQ_LEN}.",
        "",
        "| arm | N | wall s | tokens/s | peak memory MB ("
        + rows[0]["memory_measure"].upper()
        + ", process tree) | sequences |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        md.append(
            f"| {r['arm']} | {r['workers']} | {r['wall_s']} | {r['tokens_per_s']:,} | "
            f"{r['peak_memory_mb']:,} "
            f"| {r['sequences']:,} |"
        )
    md += ["", "| ratio | value | goal |", "|---|---:|---:|"]
    for k, v in ratios.items():
        goal = (
            ">= 1.0"
            if "tokens/s" in k and "ours/HF" in k
            else "<= 0.5"
            if "memory" in k
            else ">= 1.7"
        )
        md.append(f"| {k} | {v} | {goal} |")
    md += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), ""]
    for note in meta.get("notes", []):
        md.append(f"- {note}")
    return data, "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size-mb", type=float, default=1000.0, help="corpus size (MB of JSONL); default 1000"
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--corpus-dir", default=os.path.join(tempfile.gettempdir(), "tokendrop-prepare-bench")
    )
    ap.add_argument(
        "--tmp",
        default=None,
        help="scratch space for outputs and HF caches (default: beside the corpus)",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "prepare_throughput"))
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", help=argparse.SUPPRESS)
    ap.add_argument("--done-file", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm:
        return _arm_main(a)
    a.tmp = a.tmp or a.corpus_dir
    corpus, vocab, nbytes = ensure_corpus(a.corpus_dir, a.size_mb)
    notes = []
    hf_ok = not a.skip_hf
    if hf_ok:
        try:
            import datasets  # noqa: F401
        except ImportError:
            hf_ok = False
            notes.append(
                "the Hugging Face arm was skipped: `datasets` is not installed (pip "
                "install datasets)"
            )
            print(notes[-1], file=sys.stderr)
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for n in a.workers:
        for arm in ("ours", "hf") if hf_ok else ("ours",):
            print(f"{arm} N={n} ...", file=sys.stderr, flush=True)
            rows.append(run_arm(arm, n, corpus, vocab, a.tmp))
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    hf_tokens = {r["document_tokens"] for r in rows if r["arm"] == "hf"}
    ours_tokens = {r["document_tokens"] for r in rows if r["arm"] == "ours"}
    if hf_tokens and hf_tokens != ours_tokens:
        notes.append(
            f"token counts differ: ours {sorted(ours_tokens)}, HF {sorted(hf_tokens)} "
            "(tokens/s uses ours)"
        )
    elif hf_tokens:
        notes.append("both arms tokenize alike: the same document-token count")
    from tokendrop.lab.machine import cpu_model

    meta = {
        "command": "python "
        + " ".join(shlex.quote(x) for x in [os.path.relpath(__file__, REPO), *sys.argv[1:]]),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "corpus": corpus,
        "corpus_mb": nbytes / 1e6,
        "corpus_source": "mixed-english.txt.gz documents, repeated"
        if os.path.isfile(SHARED_CORPUS)
        else "generated pseudo-English",
        "vocab": vocab,
        "seq_len": SEQ_LEN,
        "versions": _versions(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "notes": notes,
    }
    data, md = report(rows, meta)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
