"""``tokendrop study``: the paper's Tables 1, 3, 4 and Figures 1, 3, reproduced at small scale.

    run_study("configs/study-cpu.toml", "runs/study-cpu", overrides=[], only=None)

One command pretrains every method of the paper's Table 1 and the drop-rate sweep of its Table 4,
each with every seed, on one prepared corpus; fine-tunes every pretrained model with the evaluation
suite (``tokendrop.finetune.evaluate``); then writes, under OUT::

    study.md                 the report: what was run (command, hardware, versions), time per method,
                             the tables, the figures, and findings computed from the numbers
    study.json               every number the report uses (per run and per method)
    study.toml               the resolved study config
    tables/table1.md         Table 1 layout: downstream columns + held-out MLM loss, per seed and mean
    tables/table3.md         Table 3 layout + pretraining cost: average score, wall time, FLOPs,
                             each relative to the baseline
    tables/table4.md         Table 4: the drop-rate sweep
    tables/time-to-quality.md  wall time / FLOPs each run needed to reach the baseline's final MLM loss
    figures/mlm-loss-vs-wall.png, figures/mlm-loss-vs-flops.png   eval MLM loss curves, all methods
    figures/fig3-importance-hist.png          Figure 3 (importance-score histogram)
    figures/fig1-examples.{html,png}          Figure 1 (held-out sentences, kept tokens in bold)
    inspect/<run>/           ``tokendrop inspect`` of the run behind Figures 1 and 3
    data/                    the corpus subset and the prepared (packed + unpacked) data
    runs/<method>-seed<k>/   the pretraining runs;  eval/  the suite's cells and results

Resumable at every level: the prepared data is reused when it matches the study config; a run with
``report.md`` and its final checkpoint is skipped, an interrupted one resumes from its latest
checkpoint (``pretrain(..., resume=True)``), a run dir with no checkpoint is restarted; finished
fine-tuning cells are reused by the suite; the outputs are rewritten (atomically) on every call.
A run or prepared directory made with a different config is never silently reused: StudyError.

Only measured numbers go into the tables; the paper's findings are quoted in the report's prose.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .config import Config, ConfigError, config_dir, from_dict, load_config, to_dict, to_toml


class StudyError(ConfigError):
    """A study that cannot go on as asked (changed config over an existing OUT, interrupted run, ...).

    A ``ConfigError`` subclass so that the command line reports it as a one-line error."""


# ----------------------------------------------------------------------------------------------
# the method table (the paper's Table 1, in its row order) and the drop-rate sweep (Table 4)


@dataclass(frozen=True)
class MethodSpec:
    name: str  # run-dir prefix and CLI name
    label: str  # the paper's row name
    overrides: tuple[str, ...]  # applied after the study's base overrides
    steps_fraction: float = 1.0  # baseline (75%): 0.75 of the base preset's steps
    unpacked: bool = False  # needs the unpacked prepared data
    group: str = ""  # baseline | proposed | selection | variant | sweep

    @property
    def dropping(self) -> bool:
        return any(o in ("drop.method=cumulative", "drop.method=half_random", "drop.method=random",
                         "drop.method=frequency", "drop.variant=avg") for o in self.overrides)


def _drop(method: str, variant: str = "drop", rate: float = 0.5, stage2: float = 0.0) -> tuple[str, ...]:
    return (f"drop.method={method}", f"drop.variant={variant}", f"drop.rate={rate!r}",
            f"drop.stage2_fraction={stage2!r}")


_DENSE = _drop("none")
STAGE2 = 0.1  # the paper: 100k of 1M steps

METHODS: dict[str, MethodSpec] = {m.name: m for m in [
    MethodSpec("baseline-unpacked", "baseline (no sequence packing)", _DENSE, unpacked=True, group="baseline"),
    MethodSpec("baseline", "baseline", _DENSE, group="baseline"),
    MethodSpec("baseline-75", "baseline (75%)", _DENSE, steps_fraction=0.75, group="baseline"),
    MethodSpec("token-drop", "token drop (proposed)", _drop("cumulative"), group="proposed"),
    MethodSpec("token-drop-stage2", "token drop + stage-2", _drop("cumulative", stage2=STAGE2), group="proposed"),
    MethodSpec("half-rand", "token drop (half-rand)", _drop("half_random"), group="selection"),
    MethodSpec("half-rand-stage2", "token drop (half-rand) + stage-2", _drop("half_random", stage2=STAGE2), group="selection"),
    MethodSpec("rand-stage2", "token drop (rand) + stage-2", _drop("random", stage2=STAGE2), group="selection"),
    MethodSpec("freq-stage2", "token drop (freq) + stage-2", _drop("frequency", stage2=STAGE2), group="selection"),
    MethodSpec("avg-stage2", "token avg + stage-2", _drop("none", "avg", stage2=STAGE2), group="variant"),
    MethodSpec("pass-stage2", "token pass + stage-2", _drop("cumulative", "pass", stage2=STAGE2), group="variant"),
    MethodSpec("layer-rearranged-stage2", "token drop (layer rearranged) + stage-2",
               _drop("cumulative", "layer_rearranged", stage2=STAGE2), group="variant"),
]}
TABLE1 = list(METHODS)
PAPER_DROP_RATES = [0.0, 0.25, 0.5, 0.625, 0.75]


def _pct(rate: float) -> str:
    return f"{100 * rate:g}"


def sweep_method(rate: float) -> MethodSpec:
    """The Table-4 run of a drop rate: 0 is the baseline, 0.5 is token drop, others ``drop-<pct>``."""
    if rate == 0.0:
        return METHODS["baseline"]
    if rate == 0.5:
        return METHODS["token-drop"]
    return MethodSpec(f"drop-{_pct(rate)}", f"drop {_pct(rate)}%", _drop("cumulative", rate=rate), group="sweep")


def method_spec(name: str, cfg: "StudyConfig") -> MethodSpec:
    if name in METHODS:
        return METHODS[name]
    for r in cfg.drop_rates:
        m = sweep_method(r)
        if m.name == name:
            return m
    raise StudyError(f"unknown method {name!r}; expected one of {', '.join(cfg.all_methods())}")


# ----------------------------------------------------------------------------------------------
# config


@dataclass
class StudyConfig:
    """A study (``configs/study-*.toml``).  Paths are relative to the working directory, else to the
    repository root.  Every pretraining run is ``load_config(base, base_overrides + <method's
    overrides> + [data.path, data.seq_len, train.seed])``."""

    name: str = ""
    base: str = "tiny"  # pretraining preset (name in configs/ or a .toml path)
    base_overrides: list[str] = field(default_factory=list)  # "section.key=value" for every run
    corpus: list[str] = field(default_factory=list)  # files, dirs, globs (tokendrop prepare's inputs)
    corpus_max_bytes: int = 0  # > 0: a deterministic subset -- whole documents in corpus order up to this size
    toy_data: bool = False  # generate a synthetic corpus + GLUE/SQuAD-layout toy tasks under OUT/data (smoke tests)
    seq_len: int = 128  # T
    vocab: str = ""  # a WordPiece vocab.txt ...
    vocab_size: int = 0  # ... or train one of this size on the corpus
    lowercase: bool = True
    eval_fraction: float = 0.01  # held-out share of the corpus (MLM eval loss, Figure 1's sentences)
    prepare_workers: int = 0  # 0 = all cores
    seeds: list[int] = field(default_factory=lambda: [0, 1])  # train.seed of each run
    methods: list[str] = field(default_factory=lambda: list(TABLE1))  # Table 1 rows
    drop_rates: list[float] = field(default_factory=lambda: list(PAPER_DROP_RATES))  # Table 4 ([] = no sweep)
    evaluate: bool = True  # fine-tune every model with the suite
    suite: str = ""  # suite preset (configs/suite-NAME.toml); "" = the suite's defaults
    suite_overrides: list[str] = field(default_factory=list)  # "key=value" for the suite config
    parallel: int = 1  # worker processes: runs (and fine-tuned models) are spread over them, one core each
    inspect_method: str = "token-drop"  # its first seed's run feeds Figures 1 and 3
    num_examples: int = 6  # Figure 1 excerpts
    docs_dir: str = ""  # also copy study.md, tables/ and figures/ (no checkpoints) here
    note: str = ""  # a line for the report (why this preset is sized as it is)

    def all_methods(self) -> list[str]:
        names = list(self.methods)
        for r in self.drop_rates:
            n = sweep_method(r).name
            if n not in names:
                names.append(n)
        return names

    def validate(self) -> "StudyConfig":
        if not self.base:
            raise ConfigError("study.base: expected a pretraining preset (e.g. tiny, demo or a .toml path)")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ConfigError(f"study.methods: unknown method(s) {', '.join(unknown)}; expected some of {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError("study.methods: listed twice")
        for r in self.drop_rates:
            if not 0.0 <= r < 1.0:
                raise ConfigError(f"study.drop_rates: expected fractions in [0, 1), got {r}")
        if len(set(self.drop_rates)) != len(self.drop_rates):
            raise ConfigError("study.drop_rates: a rate is listed twice")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"study.seeds: expected a non-empty list of distinct integers, got {self.seeds}")
        if not self.all_methods():
            raise ConfigError("study.methods / study.drop_rates: nothing to run")
        if self.seq_len < 8:
            raise ConfigError(f"study.seq_len: expected T >= 8, got {self.seq_len}")
        if not self.toy_data:
            if not self.corpus:
                raise ConfigError("study.corpus: expected corpus files (or toy_data = true)")
            if bool(self.vocab) == bool(self.vocab_size):
                raise ConfigError("study.vocab / study.vocab_size: give exactly one (a vocab.txt, or a size to train)")
        if self.vocab_size and self.vocab_size < 100:
            raise ConfigError(f"study.vocab_size: expected >= 100, got {self.vocab_size}")
        if self.parallel < 1:
            raise ConfigError(f"study.parallel: expected >= 1 worker processes, got {self.parallel}")
        if self.corpus_max_bytes < 0:
            raise ConfigError(f"study.corpus_max_bytes: expected >= 0, got {self.corpus_max_bytes}")
        if not 0.0 < self.eval_fraction < 0.5:
            raise ConfigError(f"study.eval_fraction: expected a fraction in (0, 0.5), got {self.eval_fraction}")
        for o in list(self.base_overrides) + list(self.suite_overrides):
            if "=" not in o:
                raise ConfigError(f"study override {o!r}: expected key=value")
        if self.inspect_method and self.inspect_method not in self.all_methods():
            raise ConfigError(f"study.inspect_method: {self.inspect_method!r} is not one of the study's methods "
                              f"({', '.join(self.all_methods())})")
        return self


def load_study(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> StudyConfig:
    return load_config(path, list(overrides), cls=StudyConfig)


def _resolve_path(p: str) -> Path:
    """As given if it exists (or is absolute), else relative to the repository root."""
    q = Path(p).expanduser()
    if not q.is_absolute() and not q.exists():
        alt = config_dir().parent / q
        if alt.exists() or any(ch in p for ch in "*?["):
            q = alt
    return q.resolve() if q.exists() else q


@dataclass
class RunSpec:
    method: MethodSpec
    seed: int
    name: str  # "<method>-seed<k>"
    cfg: Config


def run_config(study: StudyConfig, method: MethodSpec, seed: int, packed: str, unpacked: str | None) -> Config:
    """The pretraining config of one run (validated; data paths need not exist yet)."""
    base = load_config(study.base, list(study.base_overrides))
    ov = list(study.base_overrides) + list(method.overrides)
    if method.steps_fraction != 1.0:
        ov.append(f"train.steps={max(1, round(method.steps_fraction * base.train.steps))}")
    data = unpacked if method.unpacked else packed
    if method.unpacked and not data:
        raise StudyError(f"{method.name}: needs the unpacked prepared data")
    run_name = f"{study.name or 'study'}/{method.name}-seed{seed}"
    ov += [f"data.path={json.dumps(str(data))}", f"data.seq_len={study.seq_len}", f"train.seed={seed}",
           f"name={json.dumps(run_name)}"]
    try:
        return load_config(study.base, ov)
    except ConfigError as e:
        raise ConfigError(f"method {method.name}, seed {seed}: {e}") from None


# ----------------------------------------------------------------------------------------------
# small utilities


def _log(msg: str) -> None:
    print(f"[study] {msg}", file=sys.stderr, flush=True)


def _atomic_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _atomic_json(path: Path, obj: Any) -> None:
    _atomic_text(path, json.dumps(obj, indent=1, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o)}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else float("nan")


def _isnum(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def hardware() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    hw = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
          "python": platform.python_version(), "platform": platform.platform(),
          "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        from . import __version__

        hw["tokendrop"] = __version__
        from .checkpoint import git_revision

        hw["git_revision"] = git_revision()
    except Exception:  # noqa: BLE001
        pass
    return hw


def _cpu_s() -> float:
    """CPU seconds (user + system, all threads) of this process so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


# ----------------------------------------------------------------------------------------------
# data


_TOY_FALLBACK = {
    "filler": "the movie film story plot actor scene music it was is this a of and with very quite".split(),
    "pos": "good great excellent wonderful fun brilliant".split(),
    "neg": "bad awful boring dull terrible poor".split(),
    "names": "alice bob carol dave".split(), "verbs": "wrote built founded".split(), "things": "paris london rome".split(),
}


def write_toy_corpus(path: Path, docs: int = 300, seed: int = 0) -> Path:
    """A BERT-format corpus with the words of the toy fine-tuning tasks (so they are in the vocabulary)."""
    w = dict(_TOY_FALLBACK)
    try:
        from .finetune import toy

        w.update(filler=list(toy.FILLER), pos=list(toy.POSITIVE), neg=list(toy.NEGATIVE))
    except Exception:  # noqa: BLE001 -- the fallback lists work as well
        pass
    rng = random.Random(seed)

    def sentence() -> str:
        k = rng.random()
        if k < 0.45:
            return f"{rng.choice(w['names'])} {rng.choice(w['verbs'])} the {rng.choice(w['things'])} play ."
        words = [rng.choice(w["filler"]) for _ in range(rng.randint(4, 10))]
        words.insert(rng.randint(0, len(words)), rng.choice(w["pos"] if k < 0.75 else w["neg"]))
        return " ".join(words) + rng.choice([" .", " !", ""])

    blocks = ["\n".join(sentence() for _ in range(rng.randint(3, 9))) for _ in range(docs)]
    _atomic_text(path, "\n\n".join(blocks) + "\n")
    return path


def _subset_corpus(sources: list[str], out: Path, max_bytes: int) -> dict[str, Any]:
    """Whole documents in corpus order until ``max_bytes`` of UTF-8 text; deterministic."""
    from .data import iter_documents

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    n_docs = n_bytes = 0
    h = hashlib.sha256()
    with open(tmp, "w", encoding="utf-8") as f:
        for doc in iter_documents(sources):
            lines = [ln.strip() for ln in doc.splitlines() if ln.strip()]
            if not lines:
                continue
            block = ("\n" if n_docs else "") + "\n".join(lines) + "\n"
            f.write(block)
            b = block.encode("utf-8")
            h.update(b)
            n_docs += 1
            n_bytes += len(b)
            if n_bytes >= max_bytes:
                break
    tmp.replace(out)
    return {"documents": n_docs, "bytes": n_bytes, "sha256": h.hexdigest()}


def _data_fingerprint(study: StudyConfig) -> dict[str, Any]:
    vocab = ""
    if study.vocab:
        from .data import vocab_sha256

        vocab = vocab_sha256(_resolve_path(study.vocab))
    return {"corpus": [str(_resolve_path(c)) for c in study.corpus], "corpus_max_bytes": study.corpus_max_bytes,
            "toy_data": study.toy_data, "seq_len": study.seq_len, "vocab_sha256": vocab,
            "vocab_size": study.vocab_size or (300 if study.toy_data and not study.vocab else 0),
            "lowercase": study.lowercase, "eval_fraction": study.eval_fraction}


def prepare_data(study: StudyConfig, out: Path, need_unpacked: bool) -> dict[str, Any]:
    """Corpus (subset) -> OUT/data/packed-T (+ unpacked-T); reused when the fingerprint matches."""
    from .data import prepare

    ddir = out / "data"
    ddir.mkdir(parents=True, exist_ok=True)
    fp = _data_fingerprint(study)
    stamp = ddir / "prepared.json"
    old = _read_json(stamp) or {}
    if old.get("fingerprint") not in (None, fp):
        changed = [k for k in fp if old["fingerprint"].get(k) != fp[k]]
        raise StudyError(f"{ddir}: prepared for a different study config ({', '.join(changed)} changed); "
                         "use a new --out, or remove that directory to start over")
    info: dict[str, Any] = {"fingerprint": fp, **{k: v for k, v in old.items() if k != "fingerprint"}}
    T = study.seq_len
    corpus: list[str]
    if study.toy_data:
        cpath = ddir / "corpus.txt"
        if not cpath.is_file():
            write_toy_corpus(cpath)
        corpus = [str(cpath)]
        glue, squad = ddir / "toy-glue", ddir / "toy-squad"
        if not (glue / "SST-2" / "dev.tsv").is_file() or not (squad / "dev-v2.0.json").is_file():
            from .finetune.toy import write_toy_glue, write_toy_squad

            write_toy_glue(glue)
            write_toy_squad(squad)
        info["toy_tasks"] = {"glue": str(glue), "squad": str(squad)}
        info["corpus"] = {"path": str(cpath), "generated": True, "bytes": cpath.stat().st_size}
    elif study.corpus_max_bytes:
        cpath = ddir / "corpus-subset.txt"
        if not cpath.is_file() or "corpus" not in info:
            _log(f"writing a {study.corpus_max_bytes / 1e6:g} MB subset of {', '.join(study.corpus)} ...")
            info["corpus"] = {"path": str(cpath), "sources": fp["corpus"],
                              **_subset_corpus(fp["corpus"], cpath, study.corpus_max_bytes)}
        corpus = [str(cpath)]
    else:
        corpus = fp["corpus"]
        info["corpus"] = {"sources": corpus, "bytes": sum(Path(c).stat().st_size for c in corpus if Path(c).is_file())}
    workers = study.prepare_workers or (os.cpu_count() or 1)
    vocab = str(_resolve_path(study.vocab)) if study.vocab else None
    vsize = None if vocab else (study.vocab_size or 300)
    packed = ddir / f"packed-{T}"
    if not (packed / "meta.json").is_file():
        _log(f"preparing {packed} (T={T}) ...")
        t0 = time.perf_counter()
        s = prepare(corpus, packed, seq_len=T, vocab=vocab, vocab_size=vsize, lowercase=study.lowercase,
                    packed=True, eval_fraction=study.eval_fraction, workers=workers,
                    max_position_embeddings=max(512, T), progress=False, overwrite=packed.exists())
        info["packed"] = {"path": str(packed), "seconds": time.perf_counter() - t0,
                          **{k: s[k] for k in ("vocab_size", "documents", "tokens", "train_sequences", "eval_sequences")}}
    info.setdefault("packed", {"path": str(packed)})
    unpacked = ddir / f"unpacked-{T}"
    if need_unpacked and not (unpacked / "meta.json").is_file():
        _log(f"preparing {unpacked} (T={T}, one document segment per sequence) ...")
        t0 = time.perf_counter()
        s = prepare(corpus, unpacked, seq_len=T, vocab=packed / "vocab.txt", lowercase=study.lowercase, packed=False,
                    eval_fraction=study.eval_fraction, workers=workers, max_position_embeddings=max(512, T),
                    progress=False, overwrite=unpacked.exists())
        info["unpacked"] = {"path": str(unpacked), "seconds": time.perf_counter() - t0,
                            **{k: s[k] for k in ("documents", "tokens", "train_sequences", "eval_sequences",
                                                 "split_documents", "truncated_documents")}}
    if (unpacked / "meta.json").is_file():
        info.setdefault("unpacked", {"path": str(unpacked)})
    _atomic_json(stamp, info)
    return info


# ----------------------------------------------------------------------------------------------
# pretraining runs

# settings that may differ between invocations without changing what a run computes
_IGNORED = {"data.num_workers", "data.prefetch", "train.threads", "train.keep_checkpoints", "train.log_every",
            "train.ckpt_every", "train.compile", "train.device", "name"}


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_changes(want: Config, have: dict[str, Any]) -> list[str]:
    """Fields (dotted) whose value in the run's saved config differs from ``want``."""
    a, b = _flat(to_dict(want)), _flat(have)
    out = []
    for k, v in a.items():
        if k in _IGNORED or (k == "model.vocab_size" and v == 0):
            continue
        if k == "data.path":
            if Path(str(v)).resolve() != Path(str(b.get(k, ""))).resolve():
                out.append(f"{k}: {b.get(k)!r} -> {v!r}")
            continue
        if b.get(k) != v:
            out.append(f"{k}: {b.get(k)!r} -> {v!r}")
    return out


def run_status(run_dir: Path, cfg: Config) -> tuple[str, int]:
    """-> (state, step): 'new' (no dir), 'empty' (dir without a checkpoint), 'partial', 'finished'."""
    from . import checkpoint as ckpt_mod

    if not run_dir.exists():
        return "new", 0
    last = ckpt_mod.latest(run_dir)
    if last is None:
        return "empty", 0
    meta = _read_json(last / "meta.json") or {}
    changes = config_changes(cfg, meta.get("config", {}))
    if changes:
        raise StudyError(f"{run_dir} was trained with a different config ({'; '.join(changes[:3])}); "
                         "use a new --out, or remove that run directory to retrain it")
    step = int(meta.get("step", 0))
    if step >= cfg.train.steps:
        return "finished", step
    return "partial", step


def train_run(spec: RunSpec, run_dir: Path, progress: bool) -> dict[str, Any]:
    """Skip, resume or start one run; -> {state, seconds, loadavg} (seconds: this call's elapsed time)."""
    from .report import write_run_report
    from .train import pretrain

    la0, cpu0 = _loadavg(), _cpu_s()
    state, step = run_status(run_dir, spec.cfg)
    if state == "finished":
        if not (run_dir / "report.md").is_file():
            write_run_report(run_dir)
        return {"state": "skipped", "seconds": 0.0}
    if state == "empty":
        _log(f"{spec.name}: {run_dir} holds no checkpoint; starting it over")
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    cfg = from_dict(Config, to_dict(spec.cfg))  # a copy: pretrain fills model.vocab_size in place
    res = pretrain(cfg, run_dir, resume=state == "partial", progress=progress)
    dt = time.perf_counter() - t0
    if res.interrupted:
        raise StudyError(f"interrupted during {spec.name} at step {res.steps} (checkpoint saved); "
                         "run the same command again to resume")
    return {"state": "resumed" if state == "partial" else "trained", "seconds": dt, "from_step": step,
            "loadavg": [la0, _loadavg()], "cpu_s": _cpu_s() - cpu0}


# -- worker processes (study.parallel > 1) ---------------------------------------------------------


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))


def _train_task(name: str, cfg: dict[str, Any], run_dir: str, method: str, seed: int) -> dict[str, Any]:
    spec = RunSpec(METHODS.get(method) or MethodSpec(method, method, ()), seed, name, from_dict(Config, cfg))
    return train_run(spec, Path(run_dir), progress=False)


def _eval_task(study: dict[str, Any], out: str, data_info: dict[str, Any], models: list[tuple[str, str]]) -> dict:
    from .finetune import evaluate

    sc = from_dict(StudyConfig, study)
    cpu0 = _cpu_s()
    r = evaluate([f"{label}={path}" for label, path in models], suite_config(sc, data_info), Path(out) / "eval",
                 log=lambda m: print(f"[eval] {m}", file=sys.stderr, flush=True))
    return {"computed": r.get("computed", 0), "skipped": r.get("skipped", 0), "cpu_s": _cpu_s() - cpu0}


def _pool(parallel: int):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // parallel)
    # forkserver: workers fork from a clean server process (no OpenMP state inherited from this one,
    # unlike fork) that has imported tokendrop once (unlike spawn, which re-imports torch per worker)
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["tokendrop.study", "tokendrop.train", "tokendrop.finetune"])
    else:
        ctx = mp.get_context("spawn")
    return ProcessPoolExecutor(parallel, mp_context=ctx, initializer=_worker_init, initargs=(threads,))


def _run_parallel(parallel: int, fn: Callable, tasks: list[tuple], on_done: Callable[[tuple, Any], None]) -> None:
    """``fn(*task)`` for every task in ``parallel`` spawned processes; ``on_done(task, result)`` in this
    process as each finishes.  A failure or Ctrl-C cancels what has not started; started runs
    checkpoint on the SIGINT they receive too (same process group).  SIGTERM to this process is
    passed on to the workers, so none outlives it."""
    from concurrent.futures import as_completed

    import signal
    import threading

    ex = _pool(parallel)

    def on_sigterm(signum, frame):  # pass SIGTERM on: a training worker checkpoints and stops
        for proc in list(getattr(ex, "_processes", {}).values()):
            try:
                proc.terminate()
            except (OSError, ValueError):
                pass
        raise KeyboardInterrupt

    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        futs = {ex.submit(fn, *t): t for t in tasks}
        for f in as_completed(futs):
            on_done(futs[f], f.result())
    except BaseException as e:
        ex.shutdown(wait=True, cancel_futures=True)
        if isinstance(e, KeyboardInterrupt):
            raise StudyError("interrupted (running runs saved a checkpoint); run the same command again to resume") from None
        if type(e).__name__ == "BrokenProcessPool":
            raise StudyError(f"a worker process died ({e}); finished runs and cells are kept, run the same command "
                             "again to resume (from a Python script, call run_study under "
                             "`if __name__ == '__main__':`, which worker processes need; or set parallel = 1)") from None
        raise
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    ex.shutdown(wait=True)


# ----------------------------------------------------------------------------------------------
# measurements of a finished run


def _dedupe(recs: list[dict[str, Any]]) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, eval, events), one record per step each (the last written wins: a resumed run
    re-logs the steps after its checkpoint)."""
    train: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    events = []
    for r in recs:
        if "eval_loss" in r:
            evals[r["step"]] = r
        elif "loss" in r:
            train[r["step"]] = r
        elif "event" in r:
            events.append(r)
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)], events


def run_measurements(run_dir: Path) -> dict[str, Any]:
    """Measured numbers of a finished run (metrics.jsonl + config; FLOPs from the analytic model)."""
    from .flops import step_flops
    from .train import load_run_config, read_metrics, stage2_start

    cfg = load_run_config(run_dir)
    train, evals, events = _dedupe(read_metrics(run_dir))
    start = next((e for e in events if e.get("event") == "start"), {})
    T = int(start.get("seq_len") or cfg.data.seq_len)
    bs = cfg.train.batch_size
    f_drop = step_flops(cfg.model, T, bs, cfg.drop if cfg.drop.enabled else None).total
    f_dense = step_flops(cfg.model, T, bs, None).total
    s2 = stage2_start(cfg) if cfg.drop.enabled else 0

    def cum_flops(step: float) -> float:
        return f_drop * min(step, s2) + f_dense * max(0.0, step - s2)

    ends = [e for e in events if e.get("event") == "end"]
    steps = max([r["step"] for r in train] + [0])
    wall = ends[-1]["wall_time"] if ends else (train[-1]["wall_time"] if train else 0.0)
    tail = train[len(train) // 10:]
    tps = statistics.median([r["tokens_per_s"] for r in tail]) if tail else float("nan")
    curve = [{"step": r["step"], "wall_time": r["wall_time"], "flops": cum_flops(r["step"]),
              "eval_loss": r["eval_loss"], "eval_acc": r.get("eval_acc")} for r in evals]
    final = curve[-1] if curve else {}
    metas = sorted((run_dir / "checkpoints").glob("step-*/meta.json"))
    trained_at = (_read_json(metas[-1]) or {}).get("git_revision") if metas else None
    return {"run_dir": str(run_dir), "steps": steps, "git_revision": trained_at, "seq_len": T, "batch_size": bs,
            "tokens": steps * bs * T, "wall_time_s": wall, "tokens_per_s": tps,
            "flops_per_step": {"dropping": f_drop, "dense": f_dense}, "stage2_start": s2,
            "total_flops": cum_flops(steps), "final_eval_loss": final.get("eval_loss", float("nan")),
            "final_eval_acc": final.get("eval_acc", float("nan")), "curve": curve,
            "params": start.get("params"), "drop": dataclasses.asdict(cfg.drop),
            "model": {"num_layers": cfg.model.num_layers, "hidden_size": cfg.model.hidden_size,
                      "num_heads": cfg.model.num_heads, "vocab_size": cfg.model.vocab_size}}


def packed_split_eval(run_dir: Path, packed: str) -> dict[str, Any]:
    """The final model's MLM loss on the *packed* held-out split, with the batches and masks a packed
    run of the same seed evaluates on (for runs trained on other data: the unpacked baseline).
    Cached in ``RUN_DIR/study-packed-eval.json`` (keyed by checkpoint and data)."""
    import torch

    from . import checkpoint as ckpt_mod
    from .data import MLMLoader, PreparedData
    from .hf import load_pretrained
    from .model import BertForMaskedLM
    from .train import evaluate_mlm, load_run_config

    last = ckpt_mod.latest(run_dir)
    cache = run_dir / "study-packed-eval.json"
    old = _read_json(cache) or {}
    if last is not None and old.get("checkpoint") == last.name and old.get("data") == str(packed):
        return old
    cfg = load_run_config(run_dir)
    model, _ = load_pretrained(last or run_dir, BertForMaskedLM)
    pd = PreparedData.open(packed)
    batches = MLMLoader(pd, split="eval", batch_size=cfg.train.micro_batch_size or cfg.train.batch_size,
                        seed=cfg.train.seed, mask_prob=cfg.data.mask_prob, num_workers=0, shuffle=False, loop=False)
    with torch.no_grad():
        r = evaluate_mlm(model, batches, torch.device("cpu"), None, cfg.train.eval_batches)
    r.update(checkpoint=last.name if last else "", data=str(packed))
    _atomic_json(cache, r)
    return r


def reach_target(curve: list[dict[str, Any]], target: float) -> dict[str, float] | None:
    """First point (linear interpolation between evals) where eval loss <= target: wall, FLOPs, step."""
    prev = None
    for p in curve:
        if p["eval_loss"] <= target:
            if prev is None or prev["eval_loss"] == p["eval_loss"]:
                return {k: float(p[k]) for k in ("wall_time", "flops", "step")}
            a = (prev["eval_loss"] - target) / (prev["eval_loss"] - p["eval_loss"])
            return {k: float(prev[k] + a * (p[k] - prev[k])) for k in ("wall_time", "flops", "step")}
        prev = p
    return None


# ----------------------------------------------------------------------------------------------
# evaluation (the fine-tuning suite)

TASK_COLUMNS = [  # (key of the suite's summary, header): the paper's Table 1 columns (+ RTE if run)
    ("ax", "AX (corr.)"), ("mnli_mm", "MNLI-mm (acc.)"), ("mnli_m", "MNLI-m (acc.)"), ("qnli", "QNLI (acc.)"),
    ("qqp", "QQP (F1)"), ("sst2", "SST (acc.)"), ("rte", "RTE (acc.)"), ("glue_avg", "GLUE-avg"),
    ("squad1", "SQuAD-v1 (F1)"), ("squad2", "SQuAD-v2 (F1)"), ("squad_avg", "SQuAD-avg"),
]
AVG_KEYS = {"glue_avg", "squad_avg"}
DOWNSTREAM_KEYS = ["ax", "mnli_mm", "mnli_m", "qnli", "qqp", "sst2", "squad1", "squad2"]  # Table 3's average


def suite_config(study: StudyConfig, data_info: dict[str, Any]):
    from .finetune import SuiteConfig, load_suite

    ov = []
    toy = data_info.get("toy_tasks")
    if toy:
        ov += [f"glue_data={json.dumps(toy['glue'])}", f"squad_data={json.dumps(toy['squad'])}"]
    ov += list(study.suite_overrides)
    if study.suite:
        return load_suite(study.suite, ov)
    return from_dict(SuiteConfig, {}, ov)


def _forget_cells(out: Path, run_dir: Path) -> None:
    """A (re)trained run invalidates fine-tuning cells cached for an earlier model in its directory."""
    cells = out / "eval" / "cells"
    if not cells.is_dir():
        return
    try:
        from .finetune.suite import parse_models

        key = parse_models([str(run_dir)])[0].key
    except Exception:  # noqa: BLE001 -- no suite: nothing cached
        return
    if (cells / key).exists():
        shutil.rmtree(cells / key)


def run_evaluation(study: StudyConfig, out: Path, data_info: dict[str, Any],
                   models: list[tuple[str, Path]], evaluate_fn: Callable[..., dict] | None = None) -> dict[str, Any] | None:
    """Fine-tune every (label, run dir) with the suite into OUT/eval; -> {run dir: {columns, seconds}}.

    ``evaluate_fn`` defaults to ``tokendrop.finetune.evaluate`` (resumable per cell)."""
    if not study.evaluate or not models:
        return None
    try:
        from .finetune import evaluate as _check  # noqa: F401
    except ImportError as e:
        if evaluate_fn is None:
            _log(f"evaluation skipped: tokendrop.finetune is not available ({e})")
            return None
    scfg = suite_config(study, data_info)
    t0 = time.perf_counter()
    workers = {"computed": 0, "cpu_s": 0.0}
    cpu0 = _cpu_s()
    if study.parallel > 1 and evaluate_fn is None and len(models) > 1:
        # disjoint model subsets in worker processes (cells are separate files); the call below then
        # only reads the cached cells and writes the complete results
        groups = [models[i::study.parallel] for i in range(study.parallel)]

        def add(_t: tuple, r: dict) -> None:
            workers["computed"] += r["computed"]
            workers["cpu_s"] += r["cpu_s"]

        _run_parallel(study.parallel, _eval_task,
                      [(to_dict(study), str(out), data_info, [(lab, str(p)) for lab, p in g]) for g in groups if g], add)
    from .finetune import evaluate as _default_evaluate

    evaluate_fn = evaluate_fn or _default_evaluate
    summary = evaluate_fn([f"{label}={path}" for label, path in models], scfg, out / "eval",
                          log=lambda m: print(f"[eval] {m}", file=sys.stderr, flush=True))
    per_path: dict[str, Any] = {}
    for key, pm in summary.get("models", {}).items():
        p = str(Path(pm["path"]).resolve())
        secs = 0.0
        for mf in (out / "eval" / "cells" / key).glob("*/*/metrics.json"):
            r = _read_json(mf) or {}
            secs += float((r.get("timing") or {}).get("total_s", 0.0))
        per_path[p] = {"columns": pm.get("columns", {}), "best_cell": pm.get("best_cell", {}), "seconds": secs,
                       "cells_done": pm.get("cells_done")}
    computed = (summary.get("computed") or 0) + workers["computed"]
    return {"models": per_path, "computed": computed, "skipped": summary.get("skipped", 0) - workers["computed"],
            "seconds": time.perf_counter() - t0, "cpu_s": _cpu_s() - cpu0 + workers["cpu_s"], "suite": summary.get("suite", to_dict(scfg)),
            "note": summary.get("note", ""), "results_md": str(out / "eval" / "results.md")}


# ----------------------------------------------------------------------------------------------
# aggregation


def aggregate(study: StudyConfig, runs: list[RunSpec], out: Path, evaluation: dict[str, Any] | None,
              state: dict[str, Any], packed: str | None = None) -> dict[str, Any]:
    """Per run and per method: everything the tables, figures and report use."""
    per_run: dict[str, dict[str, Any]] = {}
    for spec in runs:
        rd = out / "runs" / spec.name
        if not (rd / "report.md").is_file():
            continue
        m = run_measurements(rd)
        m.update(method=spec.method.name, seed=spec.seed)
        if spec.method.unpacked and packed and Path(packed).is_dir():
            # its own eval split is the unpacked one: score it on the packed split the other runs use
            pe = packed_split_eval(rd, packed)
            m["own_split_final_eval_loss"] = m["final_eval_loss"]
            m["final_eval_loss"], m["final_eval_acc"] = pe["eval_loss"], pe["eval_acc"]
            m["curve_split"] = "unpacked"
        m["elapsed_s"] = state.get("runs", {}).get(spec.name, {}).get("elapsed_s")
        m["loadavg"] = state.get("runs", {}).get(spec.name, {}).get("loadavg")
        m["cpu_s"] = state.get("runs", {}).get(spec.name, {}).get("cpu_s")
        ev = (evaluation or {}).get("models", {}).get(str(rd.resolve()))
        if ev:
            cols = {k: v for k, v in ev["columns"].items() if _isnum(v)}
            down = [cols[k] for k in DOWNSTREAM_KEYS if k in cols]
            cols["downstream_avg"] = _mean(down) if down else float("nan")
            m["eval"] = cols
            m["finetune_seconds"] = ev["seconds"]
        per_run[spec.name] = m
    methods: dict[str, dict[str, Any]] = {}
    for spec in runs:
        if spec.name not in per_run:
            continue
        d = methods.setdefault(spec.method.name, {"label": spec.method.label, "group": spec.method.group, "runs": []})
        d["runs"].append(spec.name)
    keys = ["final_eval_loss", "final_eval_acc", "wall_time_s", "total_flops", "tokens_per_s", "steps", "elapsed_s",
            "cpu_s", "finetune_seconds"]
    for name, d in methods.items():
        rs = [per_run[r] for r in d["runs"]]
        d["seeds"] = [r["seed"] for r in rs]
        for k in keys:
            vals = [r.get(k) for r in rs]
            d[k] = {"mean": _mean([v for v in vals if _isnum(v)]), "per_seed": vals}
        ecols = sorted({k for r in rs for k in r.get("eval", {})})
        d["eval"] = {}
        for k in ecols:
            vals = [r.get("eval", {}).get(k) for r in rs]
            d["eval"][k] = {"mean": _mean([v for v in vals if _isnum(v)]), "per_seed": vals}
    base = methods.get("baseline")
    target = base["final_eval_loss"]["mean"] if base else None
    if base:
        bw, bf = base["wall_time_s"]["mean"], base["total_flops"]["mean"]
        for d in methods.values():
            d["rel_wall"] = d["wall_time_s"]["mean"] / bw if bw else float("nan")
            d["rel_flops"] = d["total_flops"]["mean"] / bf if bf else float("nan")
        for r in per_run.values():
            hit = reach_target(r["curve"], target) if _isnum(target) and not r.get("curve_split") else None
            r["to_target"] = hit
            if hit:
                hit["rel_wall"] = hit["wall_time"] / bw if bw else float("nan")
                hit["rel_flops"] = hit["flops"] / bf if bf else float("nan")
    return {"runs": per_run, "methods": methods, "target_eval_loss": target,
            "order": [m for m in study.all_methods() if m in methods]}


# ----------------------------------------------------------------------------------------------
# tables


def _f(x: Any, nd: int = 2) -> str:
    if not _isnum(x):
        return "–"
    return f"{x:.{nd}f}"


def _sci(x: Any) -> str:
    return f"{x:.3g}" if _isnum(x) else "–"


def _cell(stat: dict[str, Any] | None, nd: int = 2, fmt: Callable[[Any, int], str] = _f, best: bool = False) -> str:
    """'mean (seed0 / seed1)'; the mean alone when there is one seed."""
    if not stat or not _isnum(stat.get("mean")):
        return "–"
    m = fmt(stat["mean"], nd)
    if best:
        m = f"**{m}**"
    ps = stat.get("per_seed") or []
    if len(ps) > 1:
        m += " (" + " / ".join(fmt(v, nd) for v in ps) + ")"
    return m


def _best(methods: dict[str, Any], names: list[str], getter: Callable[[dict], Any], lower: bool = False) -> float | None:
    vals = [getter(methods[n]) for n in names if n in methods]
    vals = [v for v in vals if _isnum(v)]
    if len(vals) < 2:
        return None
    return min(vals) if lower else max(vals)


def _seed_note(agg: dict[str, Any]) -> str:
    seeds = sorted({r["seed"] for r in agg["runs"].values()})
    return (f"Cells: mean over pretraining seeds {seeds}, per-seed values in parentheses (seed order)."
            if len(seeds) > 1 else f"One pretraining seed ({seeds[0] if seeds else '–'}): single values.")


def table1(agg: dict[str, Any], study: StudyConfig) -> str:
    methods = agg["methods"]
    names = [n for n in agg["order"] if n in set(study.methods) or n in ("baseline", "token-drop")]
    names = [n for n in names if n in methods]
    present = [(k, h) for k, h in TASK_COLUMNS if any(k in methods[n]["eval"] for n in names)]
    head = ["Methods"] + [h for _, h in present] + ["held-out MLM loss ↓"]
    lines = ["# Table 1 (ours): pretraining methods, fine-tuned on the stand-in tasks", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for n in names:
        d = methods[n]
        row = [d["label"]]
        for k, _ in present:
            b = _best(methods, names, lambda x, k=k: x["eval"].get(k, {}).get("mean"))
            st = d["eval"].get(k)
            row.append(_cell(st, best=b is not None and st is not None and abs(st["mean"] - b) < 1e-9))
        b = _best(methods, names, lambda x: x["final_eval_loss"]["mean"], lower=True)
        st = d["final_eval_loss"]
        row.append(_cell(st, 3, best=b is not None and abs(st["mean"] - b) < 1e-12))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", _seed_note(agg) + " Best mean per column in bold. Downstream columns: best dev score over the "
              "suite's grid (see the suite settings in study.md); AX = Matthews corr. of the MNLI model; "
              "GLUE-avg / SQuAD-avg as computed by the suite over the columns shown. Held-out MLM loss: the full "
              "(no dropping) model on the held-out split of the packed pretraining data at the last step, with the "
              "same batches and masks for every run of a seed (the unpacked baseline's model is scored on that "
              "packed split too)."]
    if not present:
        lines += ["", "No downstream columns: the evaluation suite was not run (study.evaluate = false, or "
                  "tokendrop.finetune unavailable)."]
    return "\n".join(lines) + "\n"


def table3(agg: dict[str, Any]) -> str:
    methods = agg["methods"]
    names = [n for n in agg["order"] if n in methods]
    has_eval = any(methods[n]["eval"].get("downstream_avg") for n in names)
    head = ["Methods"] + (["avg. across downstream tasks"] if has_eval else []) + [
        "held-out MLM loss ↓", "steps", "pretraining wall time (s)", "rel. wall time", "FLOPs", "rel. FLOPs",
        "tokens/s"]
    lines = ["# Table 3 (ours): average downstream score and pretraining cost", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for n in names:
        d = methods[n]
        row = [d["label"]]
        if has_eval:
            row.append(_cell(d["eval"].get("downstream_avg")))
        row += [_cell(d["final_eval_loss"], 3), str(int(d["steps"]["mean"])) if _isnum(d["steps"]["mean"]) else "–",
                _cell(d["wall_time_s"], 1), _f(d.get("rel_wall"), 3), _sci(d["total_flops"]["mean"]),
                _f(d.get("rel_flops"), 3), _f(d["tokens_per_s"]["mean"], 0)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", _seed_note(agg) + " Wall time: the training steps only (evaluation and checkpoints excluded), "
              "as logged by the trainer. FLOPs: the analytic count of tokendrop.flops (forward + backward, "
              "stage-2 steps counted dense). 'rel.' = relative to the baseline's mean."
              + (" Average across downstream tasks: mean of a model's task columns (" +
                 ", ".join(k for k in DOWNSTREAM_KEYS) + "; those evaluated), then over seeds." if has_eval else "")]
    return "\n".join(lines) + "\n"


def table4(agg: dict[str, Any], study: StudyConfig) -> str:
    methods = agg["methods"]
    rows = [(r, sweep_method(r)) for r in sorted(study.drop_rates)]
    rows = [(r, m) for r, m in rows if m.name in methods]
    has = {k: any(k in methods[m.name]["eval"] for _, m in rows) for k in ("glue_avg", "squad_avg", "downstream_avg")}
    head = ["Token dropping rate"] + [h for k, h in (("glue_avg", "GLUE-avg"), ("squad_avg", "SQuAD-avg"),
                                                      ("downstream_avg", "avg. downstream")) if has[k]]
    head += ["held-out MLM loss ↓", "wall time (s)", "rel. wall time", "rel. FLOPs"]
    lines = ["# Table 4 (ours): token dropping rate", "", "| " + " | ".join(head) + " |",
             "|---|" + "---:|" * (len(head) - 1)]
    names = [m.name for _, m in rows]
    for r, m in rows:
        d = methods[m.name]
        tag = " (baseline)" if r == 0 else " (token drop)" if r == 0.5 else ""
        row = [f"drop {_pct(r)}%{tag}"]
        for k in ("glue_avg", "squad_avg", "downstream_avg"):
            if has[k]:
                b = _best(methods, names, lambda x, k=k: x["eval"].get(k, {}).get("mean"))
                st = d["eval"].get(k)
                row.append(_cell(st, best=b is not None and st is not None and abs(st["mean"] - b) < 1e-9))
        b = _best(methods, names, lambda x: x["final_eval_loss"]["mean"], lower=True)
        row += [_cell(d["final_eval_loss"], 3, best=b is not None and abs(d["final_eval_loss"]["mean"] - b) < 1e-12),
                _cell(d["wall_time_s"], 1), _f(d.get("rel_wall"), 3), _f(d.get("rel_flops"), 3)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", _seed_note(agg) + " Token drop (cumulative-loss selection, no stage-2) at each rate; best mean "
              "per column in bold."]
    if not rows:
        lines += ["", "No drop-rate sweep in this study (study.drop_rates = [])."]
    return "\n".join(lines) + "\n"


def table_time_to_quality(agg: dict[str, Any]) -> str:
    methods, runs = agg["methods"], agg["runs"]
    t = agg.get("target_eval_loss")
    lines = ["# Time to quality: reaching the baseline's final held-out MLM loss", ""]
    if not _isnum(t):
        return "\n".join(lines + ["No finished baseline run: no target.", ""])
    lines += [f"Target: {t:.4f} (the baseline's final held-out MLM loss, mean over its seeds). Interpolated "
              "linearly between evaluations.", "",
              "| Methods | seeds reaching it | wall time to target (s) | rel. to baseline wall | FLOPs to target | "
              "rel. to baseline FLOPs |", "|---|---:|---:|---:|---:|---:|"]
    for n in agg["order"]:
        d = methods[n]
        hits = [runs[r].get("to_target") for r in d["runs"]]
        ok = [h for h in hits if h]
        row = [d["label"], f"{len(ok)}/{len(hits)}"]
        if any(runs[r].get("curve_split") for r in d["runs"]):
            row = [d["label"], "n/a", "n/a (own eval split)", "–", "–", "–"]
        elif ok:
            row += [_cell({"mean": _mean([h["wall_time"] for h in ok]),
                           "per_seed": [h["wall_time"] if h else None for h in hits]}, 1),
                    _f(_mean([h["rel_wall"] for h in ok]), 3), _sci(_mean([h["flops"] for h in ok])),
                    _f(_mean([h["rel_flops"] for h in ok]), 3)]
        else:
            row += ["not reached", "–", "–", "–"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Means over the seeds that reached the target; per-seed wall times in parentheses ('–' = not "
              "reached). The baseline's own seeds reach the mean of their finals at different times. The unpacked "
              "baseline's curve is measured on its own (unpacked) eval split, so it is not compared here."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# figures


def plot_curves(agg: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .inspect_run import _save_fig

    names = agg["order"]
    cmap = plt.get_cmap("tab20")
    paths = []
    for xkey, xlabel, fname in (("wall_time", "pretraining wall-clock (s, training steps only)", "mlm-loss-vs-wall.png"),
                                ("flops", "pretraining FLOPs (analytic, cumulative)", "mlm-loss-vs-flops.png")):
        fig, axes = plt.subplots(1, 2, figsize=(15, 5.2))
        finals = []
        for i, n in enumerate(names):
            d = agg["methods"][n]
            color = cmap((2 * i) % 20 + (2 * i) // 20 % 2)  # the 10 dark hues first, then the light ones
            for j, rname in enumerate(d["runs"]):
                c = agg["runs"][rname]["curve"]
                xs, ys = [p[xkey] for p in c], [p["eval_loss"] for p in c]
                finals += ys[len(ys) // 2:]
                for ax in axes:
                    own = " (its own, unpacked eval split)" if agg["runs"][rname].get("curve_split") else ""
                    ax.plot(xs, ys, color=color, ls="-" if j == 0 else (0, (4, 2 + j)), lw=1.4, marker=".",
                            label=d["label"] + own if j == 0 else None)
        for ax in axes:
            ax.set_xlabel(xlabel)
            ax.set_ylabel("held-out MLM loss (full model)")
            ax.grid(alpha=0.3)
        axes[0].set_title("all evaluations")
        if finals:
            lo, hi = min(finals), sorted(finals)[int(0.8 * (len(finals) - 1))]
            pad = 0.05 * max(hi - lo, 1e-3)
            axes[1].set_ylim(lo - pad, hi + pad)
            xmax = max((p[xkey] for r in agg["runs"].values() for p in r["curve"]), default=1.0)
            axes[1].set_xlim(0.4 * xmax, 1.02 * xmax)
        axes[1].set_title("zoom: second half")
        t = agg.get("target_eval_loss")
        if _isnum(t):
            for ax in axes:
                ax.axhline(t, color="k", lw=0.8, ls=":")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8,
                   bbox_to_anchor=(0.5, -0.02 - 0.035 * math.ceil(len(labels) / 4)))
        fig.suptitle("Held-out MLM loss vs " + ("wall-clock" if xkey == "wall_time" else "FLOPs")
                     + " (seed 0 solid, other seeds dashed; dotted line: the baseline's final loss)", fontsize=11)
        fig.tight_layout()
        p = out / "figures" / fname
        p.parent.mkdir(parents=True, exist_ok=True)
        _save_fig(fig, p)
        paths.append(p)
    return paths


def inspect_figures(study: StudyConfig, agg: dict[str, Any], out: Path) -> dict[str, Any] | None:
    """``inspect_run`` of the inspected method's first finished seed; Figures 1 and 3 copied to figures/."""
    from .inspect_run import InspectError, inspect_run

    d = agg["methods"].get(study.inspect_method)
    if not d:
        return None
    rname = d["runs"][0]
    rd = out / "runs" / rname
    try:
        ins = inspect_run(rd, out / "inspect" / rname, num_examples=study.num_examples)
    except InspectError as e:
        _log(f"figures 1 and 3 skipped: {e}")
        return {"run": rname, "error": str(e)}
    figs = out / "figures"
    for src, dst in (("importance-hist.png", "fig3-importance-hist.png"), ("examples.png", "fig1-examples.png"),
                     ("examples.html", "fig1-examples.html")):
        tmp = figs / f".{dst}.tmp-{os.getpid()}"
        shutil.copyfile(ins / src, tmp)
        tmp.replace(figs / dst)
    return {"run": rname, "dir": str(ins), "summary": _read_json(ins / "summary.json"),
            "tokens": _read_json(ins / "tokens.json")}


# ----------------------------------------------------------------------------------------------
# report


def _cmd(config: str | os.PathLike, out: str | os.PathLike, overrides: list[str], only: list[str] | None) -> str:
    import shlex

    parts = ["tokendrop", "study", "--config", str(config), "--out", str(out)]
    for o in overrides:
        parts += ["--set", o]
    if only:
        parts += ["--only", *only]
    return " ".join(shlex.quote(p) for p in parts)


def _spread(stat: dict[str, Any]) -> float | None:
    vals = [v for v in (stat or {}).get("per_seed", []) if _isnum(v)]
    return max(vals) - min(vals) if len(vals) > 1 else None


def _verdict(diff: float, spread: float | None, higher_better: bool = True, unit: str = "") -> str:
    """Words for a difference (method - baseline), judged against the seed-to-seed spread."""
    good = diff if higher_better else -diff
    if spread is None:
        return ("better than" if good > 0 else "worse than" if good < 0 else "equal to") + \
            " the baseline (one seed: no seed-to-seed spread to judge the difference against)"
    if abs(diff) <= spread:
        return f"within the seed-to-seed spread ({spread:.3g}{unit}) of the baseline, i.e. it matched it"
    return (f"{'better' if good > 0 else 'worse'} than the baseline by more than the seed-to-seed spread "
            f"({spread:.3g}{unit})")


def findings(agg: dict[str, Any], study: StudyConfig) -> list[str]:
    """Sentences judging the results, each computed from the numbers in ``agg``."""
    M = agg["methods"]
    out: list[str] = []
    b = M.get("baseline")
    if not b:
        return ["No finished baseline run, so nothing can be compared with it."]

    def mloss(n: str) -> float:
        return M[n]["final_eval_loss"]["mean"]

    def dstat(n: str) -> dict[str, Any] | None:
        return M[n]["eval"].get("downstream_avg")

    def spread2(*stats) -> float | None:
        sp = [s for s in (_spread(x) for x in stats) if s is not None]
        return max(sp) if sp else None

    for n in ("token-drop", "token-drop-stage2"):
        if n not in M:
            continue
        d = M[n]
        out.append(f"**{d['label']}** trained for {d['wall_time_s']['mean']:.0f} s vs the baseline's "
                   f"{b['wall_time_s']['mean']:.0f} s: {100 * d['rel_wall']:.1f}% of the baseline's wall time "
                   f"({abs(100 * (1 - d['rel_wall'])):.1f}% {'less' if d['rel_wall'] <= 1 else 'more'}) and "
                   f"{100 * d['rel_flops']:.1f}% of its analytic FLOPs "
                   f"(the paper reports a 25% pretraining-time reduction for BERT-base/large).")
        diff = mloss(n) - mloss("baseline")
        out.append(f"Held-out MLM loss: {d['label']} {mloss(n):.4f} vs baseline {mloss('baseline'):.4f}, a difference "
                   f"of {diff:+.4f}; it is {_verdict(diff, spread2(d['final_eval_loss'], b['final_eval_loss']), False)}.")
        if "baseline-75" in M:
            d75 = mloss(n) - mloss("baseline-75")
            out.append(f"Against the equal-compute control, baseline (75%) ({mloss('baseline-75'):.4f}, "
                       f"{100 * M['baseline-75']['rel_wall']:.1f}% of the baseline's wall time): {d['label']} is "
                       f"{'lower' if d75 < 0 else 'higher'} by {abs(d75):.4f}.")
        ds, bs = dstat(n), dstat("baseline")
        if ds and bs and _isnum(ds["mean"]) and _isnum(bs["mean"]):
            diff = ds["mean"] - bs["mean"]
            out.append(f"Average downstream score (stand-in tasks): {d['label']} {ds['mean']:.2f} vs baseline "
                       f"{bs['mean']:.2f}, a difference of {diff:+.2f} points; it is "
                       f"{_verdict(diff, spread2(ds, bs), True, ' points')}.")
            if "baseline-75" in M and dstat("baseline-75"):
                d75 = ds["mean"] - dstat("baseline-75")["mean"]
                out.append(f"Against baseline (75%) ({dstat('baseline-75')['mean']:.2f}) the difference is {d75:+.2f} points.")
        hits = [agg["runs"][r].get("to_target") for r in d["runs"]]
        ok = [h for h in hits if h]
        if ok:
            out.append(f"{d['label']} reached the baseline's final MLM loss ({agg['target_eval_loss']:.4f}) in "
                       f"{len(ok)} of {len(hits)} seeds, after {100 * _mean([h['rel_wall'] for h in ok]):.1f}% of the "
                       f"baseline's wall time ({100 * _mean([h['rel_flops'] for h in ok]):.1f}% of its FLOPs).")
        else:
            out.append(f"{d['label']} did not reach the baseline's final MLM loss ({agg['target_eval_loss']:.4f}) "
                       f"within its steps (its final: {mloss(n):.4f}).")

    # every dropping method against the baseline: where did it not reach the baseline?
    rows = []
    for n in agg["order"]:
        if n == "baseline" or not M[n]["group"] or M[n]["group"] == "baseline":
            continue
        ds, bs = dstat(n), dstat("baseline")
        if ds and bs and _isnum(ds["mean"]) and _isnum(bs["mean"]):
            diff, sp, hb = ds["mean"] - bs["mean"], spread2(ds, bs), True
            what = "avg. downstream"
        else:
            diff, sp, hb = mloss(n) - mloss("baseline"), spread2(M[n]["final_eval_loss"], b["final_eval_loss"]), False
            what = "MLM loss"
        short = (-diff if hb else diff) > (sp or 0.0)
        rows.append((M[n]["label"], diff, short, what))
    fell = [f"{lab} ({what} {diff:+.3g})" for lab, diff, short, what in rows if short]
    if rows:
        out.append(f"Of {len(rows)} token-dropping methods, {len(rows) - len(fell)} matched or beat the baseline "
                   f"(within the seed spread, where there is one) and {len(fell)} fell short"
                   + (": " + "; ".join(fell) + "." if fell else "."))

    # which tokens to drop: cumulative vs the alternatives (all + stage-2, as in the paper)
    sel = [n for n in ("token-drop-stage2", "half-rand-stage2", "rand-stage2", "freq-stage2") if n in M]
    if len(sel) >= 2:
        by_loss = sorted(sel, key=mloss)
        txt = ", ".join(f"{M[n]['label']} {mloss(n):.4f}" for n in by_loss)
        out.append(f"Selection ablation (all with stage-2), ranked by held-out MLM loss: {txt}. Cumulative-loss "
                   f"selection ranks {by_loss.index('token-drop-stage2') + 1 if 'token-drop-stage2' in sel else '–'} "
                   f"of {len(sel)} (the paper found cumulative-loss selection better than frequency-based and random "
                   "dropping, and adding randomness unhelpful).")
        ev = [n for n in sel if dstat(n) and _isnum(dstat(n)["mean"])]
        if len(ev) >= 2 and "token-drop-stage2" in ev:
            by_ds = sorted(ev, key=lambda n: -dstat(n)["mean"])
            out.append("By average downstream score: " + ", ".join(f"{M[n]['label']} {dstat(n)['mean']:.2f}" for n in by_ds)
                       + f"; cumulative-loss selection ranks {by_ds.index('token-drop-stage2') + 1} of {len(ev)}.")
    if "token-drop" in M and "token-drop-stage2" in M:
        diff = mloss("token-drop-stage2") - mloss("token-drop")
        out.append(f"Stage-2: token drop + stage-2 {mloss('token-drop-stage2'):.4f} vs token drop {mloss('token-drop'):.4f} "
                   f"held-out MLM loss ({diff:+.4f}; the full-model evaluation favours stage-2, which ends with dense "
                   "steps). The paper found stage-2 unnecessary downstream.")
    var = [n for n in ("pass-stage2", "avg-stage2", "layer-rearranged-stage2") if n in M]
    if var and "token-drop-stage2" in M:
        out.append("Variants vs token drop + stage-2 (held-out MLM loss, wall time rel. to baseline): "
                   + "; ".join(f"{M[n]['label']} {mloss(n):.4f} ({mloss(n) - mloss('token-drop-stage2'):+.4f}), "
                               f"{100 * M[n]['rel_wall']:.1f}%" for n in var)
                   + f"; token drop + stage-2 {mloss('token-drop-stage2'):.4f}, {100 * M['token-drop-stage2']['rel_wall']:.1f}%.")
    sweep = [(r, sweep_method(r).name) for r in sorted(study.drop_rates) if sweep_method(r).name in M]
    if len(sweep) >= 2:
        best_l = min(sweep, key=lambda rn: mloss(rn[1]))
        txt = ", ".join(f"{_pct(r)}%: {mloss(n):.4f} at {100 * M[n]['rel_wall']:.0f}% time" for r, n in sweep)
        out.append(f"Drop-rate sweep, held-out MLM loss: {txt}. Lowest loss at {_pct(best_l[0])}%.")
        ev = [(r, n) for r, n in sweep if dstat(n) and _isnum(dstat(n)["mean"])]
        if len(ev) >= 2:
            best_d = max(ev, key=lambda rn: dstat(rn[1])["mean"])
            out.append("Average downstream score by rate: " + ", ".join(f"{_pct(r)}%: {dstat(n)['mean']:.2f}" for r, n in ev)
                       + f"; best at {_pct(best_d[0])}% (the paper: 50% best, more than 62.5% worse).")
    loads = [r.get("loadavg") for r in agg["runs"].values() if r.get("loadavg")]
    cores = os.cpu_count() or 1
    busy = [l for l in loads if l and max(l) > cores + 0.5]
    if busy:
        out.append(f"Timing caveat: for {len(busy)} of {len(loads)} runs the 1-minute load average exceeded the "
                   f"{cores} cores (max {max(max(l) for l in busy):.1f}) at the start or end of the run: other work "
                   "shared the machine, so wall times are noisier than the FLOP ratios.")
    return out


def _md_table(lines: list[list[str]]) -> list[str]:
    head, *rows = lines
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)] + ["| " + " | ".join(r) + " |" for r in rows]


def _ft_noise(ev: dict[str, Any] | None) -> str:
    s = (ev or {}).get("suite", {})
    seeds, cells = len(s.get("finetune_seeds") or []), len(s.get("glue_epochs") or []) * len(s.get("glue_lrs") or [])
    return (f"{seeds} fine-tuning seed(s) and {cells} grid cell(s) per GLUE task and model, so that spread "
            "includes fine-tuning noise")


def _prep_text(info: dict[str, Any]) -> str:
    """How long data preparation took, saying so when the prepared data was made outside these invocations."""
    made = sum((info.get("data", {}).get(k) or {}).get("seconds", 0.0) for k in ("packed", "unpacked"))
    spent = info.get("prepare_s", 0.0)
    if spent < 1.0 and made:
        return f"data preparation reused: it took {made:.0f} s when it was made, not counted here"
    return f"data preparation {spent:.0f} s"


def write_report(study: StudyConfig, out: Path, agg: dict[str, Any], info: dict[str, Any]) -> Path:
    M = agg["methods"]
    hw = info["hardware"]
    first = next(iter(agg["runs"].values()), None)
    lines = [f"# Token dropping study{f' — {study.name}' if study.name else ''}", "",
             f"Generated {info['generated']} by `tokendrop study`. Every number below was measured in this study's runs "
             "(files under this directory); the paper's numbers appear only in the prose, marked as the paper's.", ""]
    if study.note:
        lines += [study.note, ""]
    lines += ["## What was run", "", "```", info["command"], "```", "",
              f"- hardware: {hw.get('cpu') or 'unknown CPU'}, {hw.get('cores')} cores"
              + (f", GPU {hw['gpu']}" if hw.get("gpu") else ", no GPU")
              + f"; torch {hw.get('torch')} ("
              + (f"{max(1, (hw.get('cores') or 1) // study.parallel)} thread(s) per worker process"
                 if study.parallel > 1 else f"{hw.get('torch_threads')} threads")
              + f"), Python {hw.get('python')}, "
              f"tokendrop {hw.get('tokendrop', '?')} (runs trained at git "
              f"{', '.join(sorted({str(r.get('git_revision') or '?') for r in agg['runs'].values()})) or '?'}; "
              f"report written at git {hw.get('git_revision') or '?'})"
              + (f"; {study.parallel} runs / fine-tuning jobs at a time, each in its own process"
                 if study.parallel > 1 else "; one run at a time")]
    data = info.get("data", {})
    c = data.get("corpus", {})
    if c:
        src = ", ".join(Path(s).name for s in c.get("sources", [])) or ("generated toy corpus" if c.get("generated") else "")
        lines.append(f"- corpus: {src}" + (f"; deterministic subset: the first {c['documents']} documents, "
                                           f"{c['bytes'] / 1e6:.1f} MB" if c.get("documents") else ""))
    pk = data.get("packed", {})
    if pk.get("tokens"):
        lines.append(f"- prepared: T = {study.seq_len}, vocabulary {pk.get('vocab_size')} "
                     f"({'given vocab.txt' if study.vocab else 'WordPiece trained on the corpus'}), {pk['tokens']} tokens, "
                     f"{pk['train_sequences']} packed training sequences, {pk['eval_sequences']} held out")
    if first:
        m = first["model"]
        lines.append(f"- model: {m['num_layers']} layers, hidden {m['hidden_size']}, {m['num_heads']} heads, "
                     f"{first.get('params') or '?'} parameters; batch {first['batch_size']} x T {first['seq_len']}; "
                     f"baseline steps {int(M['baseline']['steps']['mean']) if 'baseline' in M else '?'}")
    lines.append(f"- methods: {', '.join(agg['order'])}; seeds {study.seeds}; drop-rate sweep "
                 f"{[_pct(r) + '%' for r in study.drop_rates]}")
    ev = info.get("evaluation")
    if ev:
        s = ev.get("suite", {})
        lines.append(f"- evaluation suite: tasks {s.get('tasks')}, grid GLUE epochs {s.get('glue_epochs')} x lr "
                     f"{s.get('glue_lrs')}, SQuAD epochs {s.get('squad_epochs')} x lr {s.get('squad_lrs')}, fine-tuning "
                     f"seeds {s.get('finetune_seeds')}; train examples per task "
                     f"{(s.get('glue') or {}).get('max_train_examples') or 'all'} (GLUE), "
                     f"{(s.get('squad') or {}).get('max_train_examples') or 'all'} (SQuAD)")
        if ev.get("note"):
            lines.append(f"- {ev['note']}")
    else:
        lines.append("- evaluation suite: not run; the tables show pretraining numbers only")
    lines += ["", "Resolved configs: `study.toml`; each run's `runs/NAME/config.toml`.", ""]

    # time per method
    lines += ["## Time per method", ""]
    rows = [["method", "runs", "pretraining wall (s, training steps)", "elapsed incl. eval/checkpoints (s)",
             "CPU time (s)", "fine-tuning (s)"]]
    tot = [0.0, 0.0, 0.0, 0.0]

    def ssum(xs: list[Any]) -> str:
        return _f(sum(x for x in xs if _isnum(x)), 0) if any(_isnum(x) for x in xs) else "–"

    for n in agg["order"]:
        d = M[n]
        cols = [d["wall_time_s"]["per_seed"], d["elapsed_s"]["per_seed"], d["cpu_s"]["per_seed"],
                d["finetune_seconds"]["per_seed"]]
        rows.append([d["label"], str(len(d["runs"])), _cell(d["wall_time_s"], 1)] + [ssum(c) for c in cols[1:]])
        for i, c in enumerate(cols):
            tot[i] += sum(x for x in c if _isnum(x))
    rows.append(["**total**", str(len(agg["runs"]))] + [_f(x, 0) for x in tot])
    lines += _md_table(rows)
    lines += ["", f"Whole study wall-clock over all invocations so far: {info.get('total_elapsed_s', 0) / 60:.1f} min "
              f"({_prep_text(info)}"
              + (f", evaluation suite {info['eval_s']:.0f} s" if info.get("eval_s") else "") + "). Elapsed, CPU "
              "time (user + system, all threads of the run's process) and fine-tuning (the suite's cells, wall): "
              "summed over seeds, as recorded by this study (a run trained by an earlier invocation keeps its "
              "record)." + (f" With {study.parallel} runs at a time the summed elapsed times exceed the wall-clock."
                            if study.parallel > 1 else ""), ""]

    lines += ["## Findings (computed from the tables below)", ""]
    lines += [f"- {s}" for s in findings(agg, study)]
    lines += ["", "## How this compares with the paper", "",
              "The paper (Hou et al., 2022) pretrains BERT-base/large for 1M steps of 512 x 512 tokens on "
              "BooksCorpus + Wikipedia and reports that dropping 50% of the tokens in the middle layers cuts "
              "pretraining time by 25% with equal or slightly better GLUE/SQuAD scores (Table 3 there: 85.45 vs "
              "85.16 averaged over four settings), that cumulative-loss selection beats frequency-based and random "
              "dropping, that stage-2 is unnecessary and that about 50% is the best rate (Table 4 there: 62.5% and "
              "75% worse). The findings above state, number by number, where this study agrees.", "",
              "Caveats, which limit what these numbers can say:", ""]
    if first:
        paper_tokens = 512 * 512 * 1_000_000
        bsteps = int(M["baseline"]["steps"]["mean"]) if "baseline" in M else first["steps"]
        beta = first["drop"].get("beta", 0.995) if first.get("drop") else 0.995
        for r in agg["runs"].values():
            if r.get("drop", {}).get("method") == "cumulative":
                beta = r["drop"]["beta"]
                break
        lines.append(f"- **Scale**: each baseline run here saw {first['tokens']:.3g} tokens, "
                     f"{first['tokens'] / paper_tokens:.1e} of the paper's {paper_tokens:.2g}; the model has "
                     f"{first['model']['num_layers']} layers of width {first['model']['hidden_size']} (BERT-base: 12 x 768). "
                     f"The importance vector (beta = {beta:g}) gets {bsteps} updates: an id that is a prediction target "
                     f"in every step still carries {100 * beta ** bsteps:.1f}% of its initial score at the end, rarer ids "
                     "more, so the ranking mixes loss with how rarely an id was a target (see the Spearman correlation "
                     "with rarity under Figure 3).")
        sp = _spread(M["baseline"]["final_eval_loss"]) if "baseline" in M else None
        if sp is not None:
            dsp = _spread(M["baseline"]["eval"].get("downstream_avg"))
            lines.append(f"- **Noise**: the baseline's final held-out MLM loss differs by {sp:.4f} between its seeds"
                         + (f", its average downstream score by {dsp:.2f} points ({_ft_noise(ev)})"
                            if dsp is not None else "")
                         + "; smaller differences between methods are not distinguishable from seed noise here.")
        else:
            lines.append("- **Noise**: one seed per method, so seed-to-seed noise is not measured; small differences "
                         "between methods may be noise.")
    tasks = (ev or {}).get("suite", {}).get("tasks") or []
    lines += ["- **Domain**: the pretraining text is the offline stand-in corpus (dictionaries, software "
              "documentation, literature, speeches; not BooksCorpus + Wikipedia), and the fine-tuning tasks are "
              "stand-ins in the GLUE/SQuAD file layouts built from other public data (see "
              "`shared/data/README.md`): scores are not comparable with published GLUE/SQuAD numbers"
              + ("; the QQP stand-in (same speaker or not) is not a paraphrase task." if "qqp" in tasks else "."),
              "- **Protocol**: the fine-tuning grid, task subset and training-set sizes are reduced to fit the budget "
              "(listed above); the paper takes the best of 4 grid cells on full datasets.",
              "- **Timing**: wall times are measured on the machine above; FLOPs are analytic. On CPU the kept-row "
              "gathers, the MLM head and the optimizer are a larger share of a step than on a TPU, so the measured "
              "time ratio can differ from the FLOP ratio.", ""]

    lines += ["## Tables", ""]
    for f in ("table1.md", "table3.md", "table4.md", "time-to-quality.md"):
        p = out / "tables" / f
        if p.is_file():
            body = p.read_text(encoding="utf-8").splitlines()
            lines += ["##" + body[0]] + body[1:] + [""]
    lines += ["## Figures", "", "Held-out MLM loss of every run against pretraining wall-clock and against FLOPs:", "",
              "![loss vs wall-clock](figures/mlm-loss-vs-wall.png)", "", "![loss vs FLOPs](figures/mlm-loss-vs-flops.png)", ""]
    ins = info.get("inspect")
    if ins and not ins.get("error"):
        st = (ins.get("summary") or {}).get("stats", {})
        lines += [f"Figure 3 (ours): importance scores of `{ins['run']}` at its last step.", "",
                  "![importance histogram](figures/fig3-importance-hist.png)", ""]
        if st:
            lines.append(f"{st.get('seen')} of {st.get('vocab_size')} ids were prediction targets at least once; "
                         f"{st.get('unseen_at_init')} still hold the initial score {st.get('init_score')}"
                         + (f"; the seen ids cover {100 * st['occurrences_of_seen_ids']:.1f}% of the training tokens"
                            if _isnum(st.get("occurrences_of_seen_ids")) else "")
                         + (f"; Spearman correlation of score with rarity: {st['spearman_score_vs_rarity']:.3f}"
                            if _isnum(st.get("spearman_score_vs_rarity")) else "") + ".")
            lines.append("")
        tok = ins.get("tokens") or {}
        if tok.get("top"):
            lines.append("Highest scores: " + ", ".join(f"`{r['token']}` {r['score']:.2f}" for r in tok["top"][:10])
                         + ". Lowest: " + ", ".join(f"`{r['token']}` {r['score']:.2f}" for r in tok["bottom"][:10]) + ".")
            lines.append("")
        lines += [f"Figure 1 (ours): held-out excerpts, tokens kept by `{ins['run']}`'s selector in bold with their "
                  "scores ([HTML](figures/fig1-examples.html)):", "", "![examples](figures/fig1-examples.png)", ""]
    elif ins:
        lines += [f"Figures 1 and 3 were not produced: {ins['error']}", ""]
    if ev:
        lines += ["The suite's own table (with the best grid cell per model and per-seed rows) is "
                  "[`eval/results.md`](eval/results.md).", ""]
    p = out / "study.md"
    _atomic_text(p, "\n".join(lines))
    return p


# ----------------------------------------------------------------------------------------------
# entry point


def plan_runs(study: StudyConfig, data_info: dict[str, Any] | None = None, out: Path | None = None) -> list[RunSpec]:
    """Every (method, seed) of the study, with its validated pretraining config."""
    T = study.seq_len
    packed = (data_info or {}).get("packed", {}).get("path") or str((out or Path(".")) / "data" / f"packed-{T}")
    unpacked = (data_info or {}).get("unpacked", {}).get("path") or str((out or Path(".")) / "data" / f"unpacked-{T}")
    specs = []
    for name in study.all_methods():
        m = method_spec(name, study)
        for s in study.seeds:
            specs.append(RunSpec(m, s, f"{m.name}-seed{s}", run_config(study, m, s, packed, unpacked)))
    return specs


def run_study(config: str | os.PathLike | StudyConfig, out: str | os.PathLike, overrides: list[str] | tuple[str, ...] = (),
              only: list[str] | None = None, progress: bool | None = None,
              evaluate_fn: Callable[..., dict] | None = None) -> Path:
    """Prepare, pretrain every run, evaluate, write the tables/figures/report; -> OUT/study.md.

    ``only``: pretrain just these methods (names as in ``study.methods`` or ``drop-<pct>``); the
    evaluation and the report still cover every finished run of the study in OUT.
    With ``study.parallel > 1`` runs and fine-tuning jobs go to worker processes (forkserver/spawn):
    a script calling this must do so under ``if __name__ == "__main__":``.
    """
    import torch

    threads = torch.get_num_threads()  # pretrain's train.threads sets it process-wide
    try:
        return _run_study(config, out, overrides, only, progress, evaluate_fn)
    finally:
        torch.set_num_threads(threads)


def _run_study(config, out, overrides, only, progress, evaluate_fn) -> Path:
    t_start = time.perf_counter()
    hw = hardware()  # before any run sets train.threads
    study = (from_dict(StudyConfig, to_dict(config), list(overrides)) if isinstance(config, StudyConfig)
             else load_study(config, overrides))
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if progress is None:
        progress = sys.stderr.isatty()
    names = study.all_methods()
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise StudyError(f"--only: {', '.join(bad)} not in this study's methods ({', '.join(names)})")
    selected = [n for n in names if not only or n in only]
    state_path = out / "study-state.json"
    state = _read_json(state_path) or {}
    state.setdefault("runs", {})
    state.setdefault("invocations", [])
    cmd = _cmd(config if not isinstance(config, StudyConfig) else "<StudyConfig>", out, list(overrides), only)
    state["invocations"].append({"command": cmd, "started": _dt.datetime.now().isoformat(timespec="seconds")})

    # plan (validates every run config before anything expensive happens)
    plan_runs(study, None, out)
    need_unpacked = any(method_spec(n, study).unpacked for n in selected)
    t0 = time.perf_counter()
    data_info = prepare_data(study, out, need_unpacked)
    state["prepare_s"] = state.get("prepare_s", 0.0) + (time.perf_counter() - t0)
    _atomic_json(state_path, state)
    runs = plan_runs(study, data_info, out)

    todo = [r for r in runs if r.method.name in selected]
    done = [0]

    def record(spec: RunSpec, res: dict[str, Any]) -> None:
        done[0] += 1
        rd = out / "runs" / spec.name
        rec = state["runs"].setdefault(spec.name, {"elapsed_s": 0.0})
        if res["state"] != "skipped":
            _forget_cells(out, rd)
            rec["elapsed_s"] = rec.get("elapsed_s", 0.0) + res["seconds"]
            rec["loadavg"] = res.get("loadavg")
            rec["cpu_s"] = rec.get("cpu_s", 0.0) + res.get("cpu_s", 0.0)
            rec["parallel"] = study.parallel
            rec["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
            _log(f"[{done[0]}/{len(todo)}] {spec.name}: {res['state']} in {res['seconds']:.0f} s")
        else:
            _log(f"[{done[0]}/{len(todo)}] {spec.name}: finished earlier, skipped")
        _atomic_json(state_path, state)

    pending = [r for r in todo if run_status(out / "runs" / r.name, r.cfg)[0] != "finished"]
    pending_names = {r.name for r in pending}
    for spec in todo:
        if spec.name not in pending_names:
            record(spec, train_run(spec, out / "runs" / spec.name, False))  # writes a missing report.md only
    if study.parallel > 1 and len(pending) > 1:
        _log(f"pretraining {len(pending)} runs in {study.parallel} worker processes ...")
        by_name = {r.name: r for r in pending}
        _run_parallel(study.parallel, _train_task,
                      [(r.name, to_dict(r.cfg), str(out / "runs" / r.name), r.method.name, r.seed) for r in pending],
                      lambda t, res: record(by_name[t[0]], res))
    else:
        for spec in pending:
            record(spec, train_run(spec, out / "runs" / spec.name, progress))

    finished = [r for r in runs if (out / "runs" / r.name / "report.md").is_file()]
    evaluation = None
    if study.evaluate and finished:
        _log(f"evaluation suite on {len(finished)} pretrained models ...")
        evaluation = run_evaluation(study, out, data_info, [(r.method.name, out / "runs" / r.name) for r in finished],
                                    evaluate_fn)
        if evaluation:
            state["eval_s"] = state.get("eval_s", 0.0) + evaluation["seconds"]
    agg = aggregate(study, runs, out, evaluation, state, data_info.get("packed", {}).get("path"))
    tables = out / "tables"
    _atomic_text(tables / "table1.md", table1(agg, study))
    _atomic_text(tables / "table3.md", table3(agg))
    _atomic_text(tables / "table4.md", table4(agg, study))
    _atomic_text(tables / "time-to-quality.md", table_time_to_quality(agg))
    if agg["runs"]:
        plot_curves(agg, out)
    ins = inspect_figures(study, agg, out)
    state["total_elapsed_s"] = state.get("total_elapsed_s", 0.0) + (time.perf_counter() - t_start)
    info = {"command": cmd, "hardware": hw, "generated": _dt.datetime.now().isoformat(timespec="seconds"),
            "data": data_info, "evaluation": evaluation, "inspect": ins, "total_elapsed_s": state["total_elapsed_s"],
            "prepare_s": state.get("prepare_s", 0.0), "eval_s": state.get("eval_s", 0.0)}
    _atomic_text(out / "study.toml", to_toml(study))
    report = write_report(study, out, agg, info)
    _atomic_json(out / "study.json", {"study": to_dict(study), **{k: v for k, v in info.items() if k != "inspect"},
                                      "inspect": {k: v for k, v in (ins or {}).items() if k != "tokens"},
                                      "findings": findings(agg, study), "methods": agg["methods"], "runs": agg["runs"],
                                      "target_eval_loss": agg["target_eval_loss"]})
    _atomic_json(state_path, state)
    if study.docs_dir:
        export_report(out, _resolve_docs(study.docs_dir))
    _log(f"done: {len(agg['runs'])} finished runs; report {report}")
    return report


def _resolve_docs(p: str) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else Path.cwd() / q


def export_report(out: Path, dest: Path) -> Path:
    """Copy study.md, study.json, the suite's eval/results.*, tables/ and figures/ (no runs, no
    checkpoints) to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("study.md", "study.json", "study.toml", "eval/results.md", "eval/results.json", "eval/suite.toml"):
        if (out / f).is_file():
            (dest / f).parent.mkdir(exist_ok=True)
            shutil.copyfile(out / f, dest / f)
    for sub in ("tables", "figures"):
        if (out / sub).is_dir():
            (dest / sub).mkdir(exist_ok=True)
            for f in (out / sub).iterdir():
                if f.is_file() and not f.name.startswith("."):
                    shutil.copyfile(f, dest / sub / f.name)
    return dest


__all__ = ["StudyConfig", "StudyError", "MethodSpec", "METHODS", "TABLE1", "PAPER_DROP_RATES", "sweep_method",
           "load_study", "run_config", "plan_runs", "run_study", "prepare_data", "run_status", "run_measurements",
           "aggregate", "findings", "table1", "table3", "table4", "export_report", "write_toy_corpus"]
