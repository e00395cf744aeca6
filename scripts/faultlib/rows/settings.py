"""Bad settings and flags: refused in one line naming the field, before anything is written."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from faultlib.case import Case, Outcome, text_lines
from faultlib.commands import CAMPAIGN, cli, finetune, prepare, pretrain
from faultlib.files import edit_json
from faultlib.setups import make_file, says_in_output
from tokendrop.config import NAMED_SIZES, SIZE_TAKES
from tokendrop.lab.sizes import LAB_NAMED_SIZES


def squad_check(c: Path, o: Outcome) -> str | None:
    """Row 8: a wrong answer_start is an error naming the file, or counted and reported -- never
    silently relocated."""
    if o.rc == 2:
        return None
    if o.rc != 0:
        return f"exit {o.rc}"
    text = o.stdout + o.stderr
    for f in (c / "ft").rglob("*.json"):
        text += f.read_text()
    return (
        None
        if "answer_start" in text
        else "the wrong answer_start was relocated silently (not reported)"
    )


def bad_squad(c: Path) -> None:
    for name in ("train-v1.1.json", "dev-v1.1.json"):

        def fn(d):
            a = d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]
            a["answer_start"] += 3

        edit_json(c / "squad" / name, fn)


def vocab_size_check(c: Path, o: Outcome) -> str | None:
    """Row 8: --vocab-size above what the corpus supports: a one-line error, or a warning on stderr
    that says the size actually trained (the one meta.json records)."""
    lines = text_lines(o.stderr)
    if o.rc == 2:
        return (
            None
            if len(lines) == 1 and "vocab" in lines[0].lower()
            else "the error is not one line naming the vocabulary"
        )
    size = json.loads((c / "out" / "meta.json").read_text())["vocab_size"]
    warn = [ln for ln in lines if "warn" in ln.lower() and str(size) in ln]
    return None if warn else f"no warning on stderr saying that {size} word pieces were trained"


def stsb_score(score: float) -> Callable[[Path], None]:
    """Set the score of the first STS-B training example (line 2) to ``score``."""

    def setup(c: Path) -> None:
        p = c / "glue" / "STS-B" / "train.tsv"
        lines = p.read_text(encoding="utf-8").splitlines()
        at = lines[0].lstrip("\ufeff").split("\t").index("score")
        f = lines[1].split("\t")
        f[at] = str(score)
        lines[1] = "\t".join(f)
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")

    return setup


def rows() -> list[Case]:
    """Sizes, rates and warm-ups refused at config time (pretrain, bench, study, finetune)."""
    C: list[Case] = []
    add = C.append
    # one-line errors instead of tracebacks
    for v in ("nan", "inf", "-0.001"):
        add(
            Case(
                f"lr-{v}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", "--set", f"train.lr={v}"),
                "refused at config time naming train.lr; no run dir",
                absent=("r",),
                says=("train.lr",),
            )
        )
    add(
        Case(
            "pretrain-out-a-file",
            "bad input, full disk",
            pretrain("{C}/target", "{B}/data"),
            "refused; file intact",
            setup=make_file("target"),
            watch=("target",),
            says=("{C}/target",),
        )
    )
    # a size is given or named from its source: model.vocab_size = 0 (or less) is refused
    for v in (0, -1):
        add(
            Case(
                f"pretrain-vocab-size-{v}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", "--set", f"model.vocab_size={v}"),
                "refused at config time naming model.vocab_size and its named source; no run dir",
                absent=("r",),
                says=("model.vocab_size: expected a positive integer or 'data'", f"got {v}"),
            )
        )
    # the trainer's and data's named sizes (config.NAMED_SIZES; what each takes besides its name:
    # config.SIZE_TAKES): 0 (or less) is refused naming the field's name; train.warmup_steps takes
    # 0 (no warm-up).  model.vocab_size and the fine-tuning sizes have rows of their own.
    for key, word in NAMED_SIZES.items():
        if key.split(".")[0] not in ("train", "data"):
            continue
        takes = SIZE_TAKES.get(key, "a positive integer")
        for v in (-1,) if key == "train.warmup_steps" else (0, -1):
            add(
                Case(
                    f"pretrain-{key.split('.')[1].replace('_', '-')}-{v}",
                    "bad input, full disk",
                    pretrain("{C}/r", "{B}/data", "--set", f"{key}={v}"),
                    f"refused at config time naming {key} and {word!r}; no run dir",
                    absent=("r",),
                    says=(f"{key}: expected {takes} or {word!r}", f"got {v}"),
                )
            )
    # a layer index is an index or "auto" (the variant's span): a negative one is refused
    add(
        Case(
            "pretrain-drop-start--1",
            "bad input, full disk",
            pretrain("{C}/r", "{B}/data", "--set", "drop.method=cumulative", "--set")
            + ["drop.start=-1"],
            "refused at config time naming drop.start and 'auto'; no run dir",
            absent=("r",),
            says=("drop.start: expected a layer index >= 0 or 'auto'", "got -1"),
        )
    )
    # the lab's named sizes (tokendrop.lab.sizes.LAB_NAMED_SIZES): the benchmark's threads, shape,
    # attention dropout, documents, peak and time budget, the long-context run's memory limit and a
    # family's shape, the campaign's largest-batch memory, a study's prepare workers, corpus and
    # vocabulary -- 0 or less refused naming the field and its name before anything runs or is
    # written
    bench = ["bench", "--preset", "smoke", "--json", "{C}/bench.json", "--set"]
    study = ["study", "--config", "study-tiny", "--out", "{C}/st", "--set"]
    for name, key, field, argv, got in (
        ("bench-set-threads-0", "bench.threads", None, bench + ["threads=0"], "0"),
        (
            "bench-longctx-memory-limit-0",
            "longctx.memory_limit_gib",
            None,
            ["bench", "--preset", "longctx-cpu", "--set", "memory_limit_gib=0"]
            + ["--json", "{C}/bench.json"],
            "0.0",
        ),
        (
            "study-prepare-workers-0",
            "study.prepare_workers",
            None,
            study + ["prepare_workers=0"],
            "0",
        ),
        ("bench-set-num-layers-0", "bench.num_layers", None, bench + ["num_layers=0"], "0"),
        (
            "bench-set-attention-dropout--1",
            "bench.attention_dropout",
            None,
            bench + ["attention_dropout=-1"],
            "-1.0",
        ),
        (
            "bench-set-document-tokens-0",
            "bench.document_tokens",
            None,
            bench + ["document_tokens=0"],
            "0",
        ),
        ("bench-set-peak-tflops-0", "bench.peak_tflops", None, bench + ["peak_tflops=0"], "0.0"),
        (
            "bench-set-time-budget-0",
            "bench.time_budget_s",
            None,
            bench + ["time_budget_s=0"],
            "0.0",
        ),
        (
            "bench-longctx-family-num-layers-0",
            "longctx.bert.num_layers",
            None,
            ["bench", "--preset", "longctx-cpu", "--set", "bert.num_layers=0"]
            + ["--json", "{C}/bench.json"],
            "0",
        ),
        (
            "bench-campaign-max-batch-memory-0",
            "campaign.max_batch_memory_bytes",
            "bench.max_batch_memory_bytes",
            [*CAMPAIGN, "--set", "bench.max_batch_memory_bytes=0", "--out", "{C}/st"],
            "0",
        ),
        (
            "study-corpus-max-bytes-0",
            "study.corpus_max_bytes",
            None,
            study + ["corpus_max_bytes=0"],
            "0",
        ),
        ("study-vocab-size-0", "study.vocab_size", None, study + ["vocab_size=0"], "0"),
    ):
        size = LAB_NAMED_SIZES[key]
        add(
            Case(
                name,
                "bad input, full disk",
                argv,
                "refused at config time naming the field and its name; nothing written",
                absent=("bench.json", "bench.md", "st"),
                says=(f"{field or key}: expected {size.takes} or {size.name!r}", f"got {got};"),
            )
        )
    # a warm-up counted in steps or tokens longer than the run: refused before anything is written
    for name, over, said in (
        (
            "lr-warmup-longer-than-run",
            ("train.warmup_steps=100",),
            "train.warmup_steps: the learning-rate warm-up (100 steps) is longer than the run",
        ),
        (
            "batch-warmup-longer-than-run",
            ("train.batch_warmup_start=4", "train.batch_warmup_tokens=1000000"),
            "train.batch_warmup_tokens: the batch warm-up (1,000,000 tokens) is longer than",
        ),
    ):
        add(
            Case(
                f"pretrain-{name}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", *[x for o in over for x in ("--set", o)]),
                "refused naming the warm-up and the run's length; no run dir",
                absent=("r",),
                says=(said,),
            )
        )
    # the fine-tuning sizes: refused before the model or the data are read, nothing written
    for key, word in (
        ("max_train_examples", "all"),
        ("max_eval_examples", "all"),
        ("threads", "auto"),
    ):
        add(
            Case(
                f"finetune-{key.replace('_', '-')}-0",
                "bad input, full disk",
                finetune("{C}/run", "{C}/ft", "--set", f"{key}=0"),
                f"refused at config time naming finetune.{key} and {word!r}; no output dir",
                absent=("ft",),
                says=(f"finetune.{key}: expected a positive integer or {word!r}", "got 0"),
            )
        )
    return C


def flags_and_values() -> list[Case]:
    """Command-line flags and a task's values out of range."""
    C: list[Case] = []
    add = C.append
    # a task's value ranges (STS-B scores in [0, 5])
    add(
        Case(
            "stsb-score-out-of-range",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", task="stsb", data="{C}/glue"),
            "refused naming file:line and the range; no output",
            needs=("run", "glue"),
            absent=("ft",),
            setup=stsb_score(7.5),
            says=("STS-B/train.tsv:2", "[0, 5]"),
        )
    )
    for v in ("0", "-2"):
        add(
            Case(
                f"bench-threads-{v}",
                "bad input, full disk",
                ["bench", "--preset", "smoke", "--no-hf", "--quiet", "--threads", v],
                "refused naming --threads",
                says=("threads",),
            )
        )
    for v in ("0", "-5"):
        add(
            Case(
                f"flops-seq-len-{v}",
                "bad input, full disk",
                ["flops", "--config", "tiny", "--seq-len", "128", v],
                "refused naming --seq-len",
                says=("seq-len",),
            )
        )
    for v in ("0", "-1"):
        add(
            Case(
                f"prepare-workers-{v}",
                "bad input, full disk",
                prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "150", "--workers", v),
                "refused naming --workers; no output",
                needs=("corpus.txt",),
                absent=("out",),
                says=("workers",),
            )
        )
    add(
        Case(
            "bench-json-unwritable",
            "bad input, full disk",
            ["bench", "--preset", "smoke", "--no-hf", "--json", "{C}/target/b.json"],
            "refused before the run (no progress lines), file intact",
            setup=make_file("target"),
            watch=("target",),
            says=("{C}/target",),
        )
    )
    add(
        Case(
            "prepare-vocab-size-too-large",
            "bad input, full disk",
            prepare("{C}/corpus.txt", "{C}/out", "--vocab-size", "20000"),
            "one-line error, or a warning saying the size actually trained",
            rc=(0, 2),
            needs=("corpus.txt",),
            one_line=False,
            check=vocab_size_check,
        )
    )
    add(
        Case(
            "squad-answer-start-mismatch",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", task="squad1", data="{C}/squad"),
            "error naming the file, or the mismatch counted and reported; never relocated silently",
            rc=(0, 2),
            needs=("run", "squad"),
            setup=bad_squad,
            check=squad_check,
            watch=("squad",),
            one_line=False,
        )
    )
    add(
        Case(
            "finetune-max-seq-len-clamped",
            "bad input, full disk",
            finetune("{C}/run", "{C}/ft", "--set", "max_seq_len=1024"),
            "runs; reports the max_seq_len actually used (128)",
            rc=0,
            needs=("run", "sst2"),
            check=says_in_output("max_seq_len", "128"),
            one_line=False,
        )
    )
    return C


def attention() -> list[Case]:
    """model.attention_backend."""
    C: list[Case] = []
    add = C.append
    # model.attention_backend (tokendrop.models.attention), refused before anything is written
    add(
        Case(
            "pretrain-attention-backend-unknown",
            "attention",
            pretrain("{C}/r", "{C}/data", "--set", 'model.attention_backend="fast"'),
            "refused naming the field; no run dir",
            absent=("r",),
            says=("model.attention_backend", "fast"),
        )
    )
    add(
        Case(
            "pretrain-flex-attention-on-cpu",
            "attention",
            pretrain(
                "{C}/r",
                "{C}/data",
                "--set",
                "model.family=modernbert",
                "--set",
                "model.attention_dropout=0.0",
                "--set",
                'model.attention_backend="flex"',
            ),
            "refused (FlexAttention has no CPU backward); no run dir",
            absent=("r",),
            says=("model.attention_backend", "CUDA"),
        )
    )
    return C


def bounds() -> list[Case]:
    """Counts past what the machine has, and a distributed environment without torchrun."""
    C: list[Case] = []
    add = C.append

    for setting, names in (
        ("train.threads=100000", ("train.threads", "at most 1024", "CPUs")),
        ("train.threads=1e30", ("train.threads", "expected an integer", "1e+30")),
        ("data.num_workers=1e30", ("data.num_workers", "expected an integer")),
        ("data.num_workers=100000", ("data.num_workers", "at most 256")),
    ):
        add(
            Case(
                f"pretrain-{setting.split('.', 1)[1].replace('_', '-').replace('=', '-')}",
                "bounds",
                pretrain("{C}/r", "{B}/data", "--set", setting),
                "refused before use, naming the field and the bound; no run dir",
                absent=("r",),
                says=names,
                timeout=120,
            )
        )
    add(
        Case(
            "finetune-threads-100000",
            "bounds",
            [*finetune("{C}/run", "{C}/ft"), "--set", "threads=100000"],
            "refused before use, naming the field and the bound; nothing written",
            needs=("run", "sst2"),
            absent=("ft",),
            says=("threads", "at most 1024"),
        )
    )
    for name, env, says in (
        ("world-size-abc", {"WORLD_SIZE": "abc"}, ("WORLD_SIZE='abc'", "torchrun")),
        ("world-size-alone", {"WORLD_SIZE": "2"}, ("WORLD_SIZE=2 without RANK", "torchrun")),
        (
            "leftover-torchrun-env",
            {
                "WORLD_SIZE": "2",
                "RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29551",
                "TOKENDROP_RENDEZVOUS_TIMEOUT": "3",
            },
            ("did not meet its peers", "within 3 s", "unset WORLD_SIZE"),
        ),
    ):
        add(
            Case(
                f"pretrain-{name}",
                "bounds",
                pretrain("{C}/r", "{B}/data"),
                "one line naming the variable and the fix; no wait without end; no run dir",
                absent=("r",),
                says=says,
                env=env,
                timeout=120,
            )
        )
    return C


def reads_back(c: Path, o: Outcome) -> str | None:
    """CASE/r's config.toml holds the name with its newline, and ``verify`` passes on the run."""
    name = tomllib.loads((c / "r" / "config.toml").read_text())["name"]
    if name != "line one\nline two":
        return f"config.toml's name reads back as {name!r}"
    r = cli(["verify", str(c / "r")], c, check=False)
    return None if r.returncode == 0 else f"verify r failed: {(text_lines(r.stderr) or [''])[-1]}"


def as_written() -> list[Case]:
    """A setting does what it says, or is refused: a string with a newline reads back from
    config.toml, a resume stays in its own directory, a dense start that leaves nothing to drop and
    CUDA graphs on a CPU are refused."""
    C: list[Case] = []
    add = C.append
    add(
        Case(
            "pretrain-string-setting-with-a-newline",
            "edge settings",
            pretrain("{C}/r", "{B}/data", "--set", 'name="line one\\nline two"'),
            "runs; config.toml reads back with the newline, verify passes",
            rc=0,
            check=reads_back,
            one_line=False,
        )
    )
    add(
        Case(
            "resume-with-another-out",
            "bad input, full disk",
            ["pretrain", "--resume", "{C}/run", "--out", "{C}/other", "--quiet"]
            + ["--set", "train.steps=6"],
            "refused: a resume writes into its own run; the run untouched, no other dir",
            needs=("run",),
            watch=("run",),
            absent=("other",),
            says=("continues the run in its own directory", "{C}/other"),
        )
    )
    cumulative = ("--set", "drop.method=cumulative")
    for name, extra, says in (
        (
            "dense-start-covers-the-run",
            ("--set", "drop.dense_start_share=1.0"),
            ("drop.dense_start_share", "covers every step, so nothing would drop"),
        ),
        (
            "dense-start-rounds-to-no-step",
            ("--set", "drop.dense_start_share=0.04", "--set", "train.steps=10"),
            ("drop.dense_start_share: 0.04 of 10 steps rounds to no step",),
        ),
    ):
        add(
            Case(
                f"pretrain-{name}",
                "bad input, full disk",
                pretrain("{C}/r", "{B}/data", *cumulative, *extra),
                "refused before the run dir is written, naming the share and the fix",
                absent=("r",),
                says=says,
            )
        )
    add(
        Case(
            "pretrain-compile-graphs-on-cpu",
            "bad input, full disk",
            pretrain(
                "{C}/r", "{B}/data", "--set", "train.compile=graphs", "--set", "train.device=cpu"
            ),
            "refused before the run starts, naming the setting and what the CPU can use",
            absent=("r",),
            says=("train.compile: 'graphs' captures CUDA graphs", "use 'step' (compiled) or 'off'"),
        )
    )
    return C
