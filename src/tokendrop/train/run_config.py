"""A pretraining run's resolved config: built once, before anything is written, and never changed
after.

The parsed config (``tokendrop.config``: pure, no disk) leaves some fields to the run's inputs.
:func:`resolve_init` resolves ``model.init`` once (reading config.json, hashing the weights); then
:func:`resolve_run_config` takes the parsed config, the opened prepared data and that source, and
returns a new ``Config`` in which

* the model's shape, ``init`` and ``init_sha256`` come from the source (``model.init``;
  ``tokendrop.models.source.resolve_model_init``), the data checked against its vocabulary on a new
  run;
* the fields of ``config.FROM_DATA`` (``model.vocab_size = "data"``, ``model.sep_token_id =
  -1``) and, on a new run, ``model.pad_token_id`` come from the data;
* ``data.path``, ``data.paths`` and ``drop.counts_path`` are absolute (``--resume`` from any working
  directory);
* ``train.tokens`` / ``train.epochs`` / ``train.warmup_ratio`` are resolved to ``train.steps`` and
  ``train.warmup_steps`` against the data and the world size
  (``tokendrop.train.budget.resolved_train``).

That resolved config is what the run writes to ``RUN/config.toml`` and into every checkpoint.
:func:`resolve_config` is the same step for a command that may run without prepared data
(``tokendrop flops``): with ``data.path`` it is :func:`open_run_data`; without, a field that only
the data can fill is refused, naming the fix.
"""

from __future__ import annotations

import copy
import os

from tokendrop.config import SEQ_LEN_FROM_DATA, Config
from tokendrop.config.model import VOCAB_FROM_DATA
from tokendrop.data.mixture import open_data
from tokendrop.errors import ConfigError
from tokendrop.models.source import positions_error, resolve_init_source, resolve_model_init
from tokendrop.models.weights import InitSource
from tokendrop.train.budget import resolved_train
from tokendrop.train.continued import check_vocabulary
from tokendrop.train.schedules import batch_warmup_start


def resolve_init(cfg: Config, resume: bool = False) -> InitSource | None:
    """The run's continued-pretraining source, resolved once (None without ``model.init``).  A new
    run always needs it (its weights are loaded); a resumed run only when its config is not resolved
    yet (a run's own config.toml is: ``--resume`` never needs the source)."""
    if not cfg.model.init or (resume and cfg.model.resolved):
        return None
    return resolve_init_source(cfg.model.init)


def resolve_run_config(
    cfg: Config, data, src: InitSource | None, new_run: bool = True, world: int = 1
) -> Config:
    """The parsed ``cfg`` + the prepared ``data`` (a ``PreparedData``) + the resolved ``src`` -> the
    run's resolved config (a new object, validated; ``cfg`` is not changed).  ConfigError on a
    mismatch, naming the field and the fix."""
    out = copy.deepcopy(cfg)
    if src is not None:
        out.model = resolve_model_init(cfg.model, src)
        if new_run:  # the source's vocabulary, before anything is written
            check_vocabulary(src, data)
    # recorded absolute: --resume from any cwd
    for sec, key in (
        (out.data, "path"),
        (out.drop, "counts_path"),
    ):
        if getattr(sec, key):
            setattr(sec, key, os.path.abspath(getattr(sec, key)))
    out.data.paths = [os.path.abspath(p) for p in out.data.paths]
    try:  # train.tokens / epochs / warmup_ratio -> steps, recorded in config.toml
        out.train = resolved_train(out.train, data.num_sequences("train"), data.seq_len, world)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_warmups_fit(out.train, data.seq_len)
    m = out.model
    field, where = (
        ("data.path", out.data.path) if out.data.path else ("data.paths", ", ".join(out.data.paths))
    )
    if m.vocab_size == VOCAB_FROM_DATA:
        m.vocab_size = data.vocab_size
    if m.sep_token_id < 0:  # document boundaries of the packed rows (model.document_attention)
        m.sep_token_id = int(data.special_ids["sep"])
    elif m.uses_document_attention and m.sep_token_id != int(data.special_ids["sep"]):
        raise ConfigError(
            f"model.sep_token_id: {m.sep_token_id} but {where} separates documents with "
            f"[SEP] = {data.special_ids['sep']}; remove model.sep_token_id (it comes from the data)"
        )
    if data.vocab_size != m.vocab_size:
        fix = (
            f"set model.vocab_size = {data.vocab_size} (--set model.vocab_size={data.vocab_size}) "
            f"to train on this data, or prepare it with a vocabulary of {m.vocab_size} ids "
            "(tokendrop prepare --vocab FILE)"
            if new_run
            else f"a resumed run keeps its {m.vocab_size}-id vocabulary: give data prepared with "
            "it (tokendrop prepare --vocab RUN/tokenizer/vocab.txt)"
        )
        raise ConfigError(
            f"{field}: {where} was prepared with a vocabulary of {data.vocab_size} ids but "
            f"model.vocab_size is {m.vocab_size}; {fix}"
        )
    if out.data.seq_len != SEQ_LEN_FROM_DATA and data.seq_len != out.data.seq_len:
        raise ConfigError(
            f"data.seq_len: expected T={out.data.seq_len} but {where} was prepared with "
            f"T={data.seq_len}"
        )
    # how to extend the positions, or why they cannot be
    if data.seq_len > m.max_position_embeddings:
        raise ConfigError(positions_error(field, data.seq_len, m, m.init))
    pad = data.special_ids.get("pad")
    if new_run and pad is not None and m.pad_token_id != pad:
        # the pad id comes from the data's vocabulary (the embedding's padding row, the export's
        # config)
        if m.pad_token_id != 0 and not m.init:
            raise ConfigError(
                f"model.pad_token_id: {m.pad_token_id}, but [PAD] is id {pad} in the vocabulary of "
                f"{where}; leave model.pad_token_id unset (the data's id is used)"
            )
        m.pad_token_id = pad
    return out.validate()


def check_warmups_fit(tc, seq_len: int) -> None:
    """Every warm-up counted in steps or tokens fits in the run it belongs to (one that is longer
    would never end: the learning rate never reaches its peak, the batch never its size); shares are
    checked by the config.  A time-budgeted run's length in steps is not known in advance: its
    warm-ups are not checked.  ConfigError naming both settings."""
    steps = tc.fixed_steps
    if not steps or tc.time_budget:
        return
    if tc.fixed_warmup_steps > steps:
        raise ConfigError(
            f"train.warmup_steps: the learning-rate warm-up ({tc.warmup_steps} "
            f"steps) is longer than "
            f"the run (train.steps = {steps}); set train.warmup_steps <= "
            f"{steps}, or a share "
            "of the run: train.warmup_ratio = 0.1"
        )
    tokens = steps * tc.batch_size * seq_len
    if batch_warmup_start(tc) and tc.fixed_batch_warmup_tokens > tokens:
        raise ConfigError(
            f"train.batch_warmup_tokens: the batch warm-up "
            f"({tc.fixed_batch_warmup_tokens:,} tokens) is longer "
            f"than the run ({steps} steps x {tc.batch_size} x {seq_len} = "
            f"{tokens:,} tokens); set "
            f"train.batch_warmup_tokens <= {tokens}, or a share of the run: "
            f"train.batch_warmup_share"
        )


def open_run_data(cfg: Config, src: InitSource | None, new_run: bool = True, world: int = 1):
    """-> (the run's resolved config, the prepared data: one directory or a weighted mixture)."""
    if not (cfg.data.path or cfg.data.paths):
        raise ConfigError(
            "data.path: no prepared data directory given (run `tokendrop prepare` first)"
        )
    # data.paths: a weighted mixture
    data = open_data(cfg.data.path, cfg.data.paths, cfg.data.weights)
    return resolve_run_config(cfg, data, src, new_run, world), data


def resolve_config(
    cfg: Config, src: InitSource | None, fix: str, world: int = 1
) -> tuple[Config, object | None]:
    """-> (the resolved config, the prepared data or None) for a command that reads the config's
    shape without training on it (``tokendrop flops``).  With ``data.path`` / ``data.paths``:
    :func:`open_run_data`, exactly as pretraining resolves it.  Without: the source's shape
    (``src``, from :func:`resolve_init`), and a field that only the data can fill
    (``model.vocab_size = "data"``) is a ConfigError that names ``fix`` (how this command is given
    the data or the value); ``model.sep_token_id`` stays -1 (nothing without data reads it)."""
    if cfg.data.path or cfg.data.paths:
        return open_run_data(cfg, src, new_run=True, world=world)
    out = copy.deepcopy(cfg)
    if src is not None:
        out.model = resolve_model_init(cfg.model, src)
    if out.model.vocab_size == VOCAB_FROM_DATA:
        raise ConfigError(
            f'model.vocab_size: "{VOCAB_FROM_DATA}" (the prepared data\'s vocabulary), but no '
            f"prepared data is given; {fix}"
        )
    return out.validate(), None
