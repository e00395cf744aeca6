"""Data pipeline throughput: `prepare` (MB/s of input text) and `MLMLoader` (sequences/s).

    .venv/bin/python benchmarks/data_throughput.py                      # full mixed corpus, T=512
    .venv/bin/python benchmarks/data_throughput.py --corpus FILE --seq-len 128 --loader-batches 100

Writes ``benchmarks/results/data_throughput.json`` and ``.md`` (command, hardware, versions, load
average -- the machine may be shared -- wall and CPU seconds).  Prepare throughput is the
uncompressed input size divided by the wall time of the whole `prepare` call (reading, tokenizing,
packing, writing).  Loader throughput is measured on the prepared train split with the trainer's
settings (batch 32, T=512, 15% masking, shuffled), for several worker counts; it is a property of
the loader alone, to be compared with the model's consumption (sequences/s of a training step).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import shlex
import shutil
import sys
import tempfile
import time

from tokendrop.lab.machine import cpu_model, loadavg as machine_loadavg

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPUS = "/work/shared/data/corpus/mixed-english.txt.gz"
DEFAULT_VOCAB = "/work/shared/data/vocab/bert-base-uncased-vocab.txt"


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def loadavg() -> list[float]:
    return [round(x, 2) for x in machine_loadavg() or []]


def busy(ms: float) -> None:
    """Stand-in for a model step: torch matmuls on all cores for ``ms`` milliseconds."""
    import torch

    a = torch.randn(256, 256)
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def bench_loader(
    pd, batch_size: int, workers: int, batches: int, warmup: int = 5, consumer_ms: float = 0.0
) -> dict:
    from tokendrop.data import MLMLoader

    loader = MLMLoader(pd, batch_size=batch_size, num_workers=workers, prefetch=4, seed=0)
    it = iter(loader)
    for _ in itertools.islice(it, warmup):
        pass
    t0 = time.perf_counter()
    waits = []
    n = 0
    while n < batches:
        t = time.perf_counter()
        b = next(it)
        waits.append(time.perf_counter() - t)
        n += 1
        if consumer_ms:
            busy(consumer_ms)
    dt = time.perf_counter() - t0
    loader.close()
    return {
        "num_workers": workers,
        "batches": n,
        "seconds": round(dt, 3),
        "sequences_per_s": round(n * batch_size / dt, 1),
        "tokens_per_s": round(n * batch_size * pd.seq_len / dt, 1),
        "ms_per_batch": round(1000 * dt / n, 3),
        "consumer_ms": consumer_ms,
        # time the consumer waited in next(): mean, median, 90th percentile
        "blocked_ms_per_batch": round(1000 * sum(waits) / n, 3),
        "blocked_ms_median": round(1000 * sorted(waits)[n // 2], 3),
        "blocked_ms_p90": round(1000 * sorted(waits)[min(n - 1, (9 * n) // 10)], 3),
        "shape": {k: list(v.shape) for k, v in b.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", nargs="+", default=[DEFAULT_CORPUS])
    ap.add_argument("--vocab", default=DEFAULT_VOCAB)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--loader-batches", type=int, default=300)
    ap.add_argument("--loader-workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--consumer-ms",
        type=float,
        default=100.0,
        help="also measure the wait per batch behind a simulated model step of this "
        "many ms (0: skip)",
    )
    ap.add_argument("--consumer-batches", type=int, default=50)
    ap.add_argument(
        "--prepared", default="", help="reuse this prepared directory (skips the prepare benchmark)"
    )
    ap.add_argument("--keep", default="", help="write the prepared data here and keep it")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--name", default="data_throughput")
    args = ap.parse_args(argv)

    import numpy as np
    import tokenizers
    import torch

    from tokendrop.data import PreparedData, prepare

    env = {
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable), *sys.argv]),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "tokenizers": tokenizers.__version__,
        "platform": platform.platform(),
        "loadavg_start": loadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    result: dict = {"env": env}
    tmp = None
    if args.prepared:
        pd = PreparedData.open(args.prepared)
    else:
        out = args.keep or os.path.join(tempfile.mkdtemp(prefix="td-bench-"), "prepared")
        tmp = None if args.keep else os.path.dirname(out)
        c0, t0 = cpu_seconds(), time.perf_counter()
        s = prepare(
            args.corpus,
            out,
            args.seq_len,
            vocab=args.vocab,
            workers=args.workers,
            progress=True,
            overwrite=bool(args.keep),
        )
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
        pd = PreparedData.open(out)
        result["prepare"] = {
            "corpus": args.corpus,
            "compressed_bytes": sum(os.path.getsize(c) for c in args.corpus if os.path.isfile(c)),
            "input_bytes": s["input_bytes"],
            "seq_len": args.seq_len,
            "workers": args.workers,
            "mode": pd.meta["parallelism"]["mode"],
            "documents": s["documents"],
            "tokens": s["tokens"],
            "train_sequences": s["train_sequences"],
            "eval_sequences": s["eval_sequences"],
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "mb_per_s": round(s["input_bytes"] / 1e6 / wall, 3),
            "mb_per_cpu_s": round(s["input_bytes"] / 1e6 / cpu, 3),
            "tokens_per_s": round(s["tokens"] / wall, 1),
            "tokenize_s": pd.meta["seconds"]["tokenize"],
        }
        print(json.dumps(result["prepare"], indent=2), flush=True)
    result["loader"] = []
    for w in args.loader_workers:
        r = bench_loader(pd, args.batch_size, w, args.loader_batches)
        r.update(seq_len=pd.seq_len, batch_size=args.batch_size, mask_prob=0.15, packed=pd.packed)
        result["loader"].append(r)
        print(json.dumps(r), flush=True)
    result["loader_behind_model"] = []
    for w in args.loader_workers if args.consumer_ms > 0 else []:
        r = bench_loader(
            pd, args.batch_size, w, args.consumer_batches, consumer_ms=args.consumer_ms
        )
        r.update(seq_len=pd.seq_len, batch_size=args.batch_size)
        result["loader_behind_model"].append(r)
        print(json.dumps(r), flush=True)
    env["loadavg_end"] = loadavg()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)

    os.makedirs(args.results, exist_ok=True)
    jpath = os.path.join(args.results, f"{args.name}.json")
    with open(jpath, "w") as f:
        json.dump(result, f, indent=2)
    md = [
        "# Data pipeline throughput",
        "",
        f"Command: `{env['command']}`",
        "",
        f"Hardware: {env['cpu']}, {env['cpu_count']} cores; Python {env['python']}, torch "
        f"{env['torch']}, "
        f"numpy {env['numpy']}, tokenizers {env['tokenizers']}; {env['date']}.",
        f"Load average at start / end: {env['loadavg_start']} / {env['loadavg_end']} (the machine "
        "may be shared; "
        "CPU seconds are less sensitive to that than wall time).",
        "",
    ]
    if "prepare" in result:
        p = result["prepare"]
        md += [
            "## prepare",
            "",
            "| corpus | input (uncompressed) | T | workers / mode | documents | tokens | wall s | "
            "CPU s | MB/s | MB per CPU-s |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {', '.join(os.path.basename(c) for c in p['corpus'])} | "
            f"{p['input_bytes'] / 1e6:.1f} MB | {p['seq_len']} | "
            f"{p['workers']} / {p['mode']} | {p['documents']} | {p['tokens']} | {p['wall_s']} | "
            f"{p['cpu_s']} | "
            f"{p['mb_per_s']} | {p['mb_per_cpu_s']} |",
            "",
        ]
    md += [
        "## MLMLoader",
        "",
        "Consumer doing nothing else (the loader's own throughput):",
        "",
        "| workers | T | batch | sequences/s | tokens/s | ms/batch |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["loader"]:
        md.append(
            f"| {r['num_workers']} | {r['seq_len']} | {r['batch_size']} | {r['sequences_per_s']} | "
            f"{r['tokens_per_s']:.0f} | {r['ms_per_batch']} |"
        )
    if result["loader_behind_model"]:
        md += [
            "",
            f"Behind a simulated model step ({args.consumer_ms:.0f} ms of torch matmuls on all "
            "cores per batch): "
            "time the training loop waits for each batch.",
            "",
            "| workers | wait per batch: median ms | mean ms | p90 ms |",
            "|---|---|---|---|",
        ]
        md += [
            f"| {r['num_workers']} | {r['blocked_ms_median']} | {r['blocked_ms_per_batch']} | "
            f"{r['blocked_ms_p90']} |"
            for r in result["loader_behind_model"]
        ]
    md.append("")
    with open(os.path.join(args.results, f"{args.name}.md"), "w") as f:
        f.write("\n".join(md))
    print(f"wrote {jpath}")
    return result


if __name__ == "__main__":
    main()
