"""Where a run's metrics go besides ``metrics.jsonl``: ``train.report_to``.

``metrics.jsonl`` (``tokendrop.runs.metrics``) is always written -- resume, reports and ``verify``
read it -- and is what ``"jsonl"`` names.  The others are each tracker's own client, imported only
when asked for (a one-line error when it is not installed, before anything is written):

* ``"tensorboard"``: ``RUN/tensorboard`` (torch's SummaryWriter);
* ``"wandb"``: Weights & Biases, ``wandb.init`` with the run's config; project ``$WANDB_PROJECT``
  (default "tokendrop"), ``WANDB_MODE=offline`` works without an account (files under
  ``RUN/wandb``);
* ``"mlflow"``: MLflow's tracking client; ``$MLFLOW_TRACKING_URI`` (a server,
  ``sqlite:///mlflow.db``; unset: MLflow's default), experiment ``$MLFLOW_EXPERIMENT_NAME`` (default
  "tokendrop").

Names are namespaced as transformers' and composer's loggers write them: ``train/loss``,
``train/lr``, ``eval/loss``, ``eval/acc``, ``perf/tokens_per_s`` ...  (``tag_of``); the config is
logged as text / parameters, never as scalars; event records (start, init, head warm-up, end) are
text, not charts.  A resumed run continues the same W&B / MLflow run (their ids are kept in the
run's start record).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from tokendrop.errors import ConfigError, TrainingError

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
SETTINGS = {
    "tensorboard": "RUN/tensorboard must be writable",
    "wandb": "WANDB_MODE, WANDB_API_KEY, WANDB_PROJECT",
    "mlflow": "MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME",
}
PERF = {"step_time", "tokens_per_s", "wall_time", "cpu_time", "flops_per_step", "flops", "mfu"}


def check_installed(report_to: list[str]) -> None:
    """A one-line ConfigError for a tracker asked for whose package is not installed."""
    for name in report_to:
        pkg = PACKAGES.get(name)
        if pkg and importlib.util.find_spec(pkg) is None:
            raise ConfigError(
                f"train.report_to: {name!r} is asked for but the {pkg} package is not installed; "
                f"pip install 'tokendrop[trackers]' (or pip install {pkg}), or remove {name!r} "
                f"from train.report_to (now {report_to})"
            )


def tag_of(key: str) -> str:
    """A metrics.jsonl key -> its namespaced tracker name (``eval_loss`` -> ``eval/loss``, ...)."""
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_") :]
    if key == "unigram_entropy":
        return "eval/unigram_entropy"
    if key in PERF:
        return "perf/" + key
    return "train/" + key


def scalars(rec: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of a step or evaluation record under their tracker names."""
    return {
        tag_of(k): float(v)
        for k, v in rec.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1e-4}} -> {"train.lr": 1e-4}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class _TensorBoard:
    def __init__(self, run_dir: Path, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.w = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)

    def config(self, cfg: dict[str, Any], toml: str) -> None:
        self.w.add_text("config", "```toml\n" + toml + "\n```", 0)

    def log(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.w.add_scalar(k, v, step)

    def event(self, rec: dict[str, Any]) -> None:
        self.w.add_text(
            f"events/{rec['event']}",
            "```json\n" + json.dumps(rec, indent=1, default=str) + "\n```",
            int(rec.get("step", 0)),
        )

    def close(self, ok: bool) -> None:
        self.w.close()


class _WandB:
    def __init__(self, run_dir: Path, name: str, run_id: str | None, cfg: dict[str, Any]):
        import wandb

        self.wandb = wandb
        # kept in the start record: a resume continues this run
        self.id = run_id or uuid.uuid4().hex[:8]
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "tokendrop"),
            name=name,
            id=self.id,
            resume="allow",
            dir=str(run_dir),
            config=cfg,
            reinit="create_new",
        )

    def config(self, cfg: dict[str, Any], toml: str) -> None:
        pass  # given to wandb.init

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def event(self, rec: dict[str, Any]) -> None:
        self.run.summary.update(
            {
                f"events/{rec['event']}/{k}": v
                for k, v in rec.items()
                if k not in ("event", "step") and isinstance(v, (int, float, str, bool))
            }
        )

    def close(self, ok: bool) -> None:
        self.run.finish(exit_code=0 if ok else 1)


class _MLflow:
    def __init__(self, run_dir: Path, name: str, run_id: str | None):
        from mlflow.tracking import MlflowClient

        # $MLFLOW_TRACKING_URI, else MLflow's default (sqlite:///mlflow.db here)
        self.client = MlflowClient()
        if run_id:
            self.id = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            exp_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "tokendrop")
            exp = self.client.get_experiment_by_name(exp_name)
            exp_id = (
                exp.experiment_id if exp is not None else self.client.create_experiment(exp_name)
            )
            self.id = self.client.create_run(exp_id, run_name=name).info.run_id
        self.new = not run_id

    def config(self, cfg: dict[str, Any], toml: str) -> None:
        if not self.new:
            return  # a run's parameters are logged once
        from mlflow.entities import Param

        params = [Param(k, str(v)[:500]) for k, v in flat(cfg).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per call
            self.client.log_batch(self.id, params=params[i : i + 100])
        self.client.log_text(self.id, toml, "config.toml")

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def event(self, rec: dict[str, Any]) -> None:
        self.client.log_dict(
            self.id, rec, f"events/{rec['event']}-step{int(rec.get('step', 0))}.json"
        )

    def close(self, ok: bool) -> None:
        self.client.set_terminated(self.id, status="FINISHED" if ok else "KILLED")


class Trackers:
    """The trackers of ``report_to`` for one run (rank 0).  ``resumed``: a run continued from a
    checkpoint (``purge_step``: TensorBoard drops its events from that step on; ``ids``: the W&B /
    MLflow run ids its start record kept as ``tracker_ids``); ``self.ids`` holds them for a new
    run."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        report_to: list[str],
        *,
        name: str = "",
        resumed: bool = False,
        purge_step: int | None = None,
        ids: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
        config_toml: str = "",
    ):
        run_dir = Path(run_dir)
        ids = ids or {}
        name = name or run_dir.name
        self.open: list[Any] = []
        self.ids: dict[str, str] = {}
        kinds = {
            "tensorboard": lambda: _TensorBoard(run_dir, purge_step),
            "wandb": lambda: _WandB(run_dir, name, ids.get("wandb"), config or {}),
            "mlflow": lambda: _MLflow(run_dir, name, ids.get("mlflow")),
        }
        for t in report_to:
            assert t in kinds, t  # train.report_to's names (tokendrop.config.REPORT_TO) bar jsonl
            try:
                tr = kinds[t]()
            # the tracker's own client refused (no server, no login, ...): one line
            except Exception as e:
                self.close(ok=False)
                raise TrainingError(
                    f"train.report_to: {t} did not start ({type(e).__name__}: "
                    f"{' '.join(str(e).split())[:300]}); fix its settings ({SETTINGS[t]}) or "
                    f"remove {t!r} from train.report_to, then --resume"
                ) from None
            if hasattr(tr, "id"):
                self.ids[t] = tr.id
            self.open.append(tr)
        if config is not None and not resumed:  # a new run: its config, once
            for tr in self.open:
                tr.config(config, config_toml)

    def write(self, rec: dict[str, Any]) -> None:
        if not self.open:
            return
        if "event" in rec:
            for tr in self.open:
                tr.event(rec)
            return
        values = scalars(rec)
        if values:
            for tr in self.open:
                tr.log(values, int(rec["step"]))

    def close(self, ok: bool = True) -> None:
        for tr in self.open:
            tr.close(ok)
        self.open = []


__all__ = ["Trackers", "check_installed", "tag_of", "scalars", "PACKAGES"]
