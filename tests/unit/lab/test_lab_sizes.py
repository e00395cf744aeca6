"""The lab's configs name a size's source as the library's do: the benchmark's and the
campaign's threads ("auto": torch's default), the long-context run's memory limit ("machine"), a
study's prepare workers ("auto": one per core); 0 or a negative size is refused in one line naming
the field, the name and the fix, and a study's own study.toml written with 0 still loads."""

from pathlib import Path

import pytest

from tokendrop.config import THREADS_AUTO
from tokendrop.errors import ConfigError
from tokendrop.lab.bench.campaign.config import campaign_config
from tokendrop.lab.bench.longctx import MEMORY_MACHINE, longctx_from_dict
from tokendrop.lab.bench.presets import bench_config
from tokendrop.lab.study.plan import load_study

REPO = Path(__file__).resolve().parents[3]

# field as its message names it -> (build a config with that value, the name, the message's rest)
LAB_SIZES = {
    "bench.threads": (
        lambda v: bench_config({"threads": v}),
        THREADS_AUTO,
        "a positive integer or 'auto' (torch's default)",
    ),
    "longctx.threads": (
        lambda v: longctx_from_dict({"threads": v}),
        THREADS_AUTO,
        "a positive integer or 'auto' (torch's default)",
    ),
    "longctx.memory_limit_gib": (
        lambda v: longctx_from_dict({"memory_limit_gib": v}),
        MEMORY_MACHINE,
        "a positive number of GiB or 'machine' (this machine's memory, or the GPU's)",
    ),
    "bench.threads (campaign)": (
        lambda v: campaign_config("gpu", [f"bench.threads={v}"]),
        THREADS_AUTO,
        "a positive integer or 'auto' (torch's default)",
    ),
    "study.prepare_workers": (
        lambda v: load_study("study-tiny", [f"prepare_workers={v}"]),
        THREADS_AUTO,
        "a positive integer or 'auto' (one per core)",
    ),
}


@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("field", sorted(LAB_SIZES))
def test_a_lab_size_of_zero_or_less_is_refused_naming_its_source(field, value):
    build, word, expected = LAB_SIZES[field]
    name = field.split(" ")[0]
    with pytest.raises(ConfigError) as e:
        build(value)
    got = float(value) if name.endswith("_gib") else value  # the value as the config holds it
    assert str(e.value).startswith(f"{name}: expected {expected}, got {got}; write {name} = ")
    assert "\n" not in str(e.value)
    build(word)  # the name itself is taken
    build(2)  # and a positive size


def test_the_lab_defaults_are_the_names():
    assert bench_config({}).threads == THREADS_AUTO
    lc = longctx_from_dict({})
    assert (lc.threads, lc.memory_limit_gib) == (THREADS_AUTO, MEMORY_MACHINE)
    assert campaign_config("gpu").bench.threads == THREADS_AUTO


def test_a_study_toml_an_older_study_wrote_with_zero_workers_loads(tmp_path):
    """The committed study records hold ``prepare_workers = 0`` (written before the name): read as
    a record they load with "auto"; read as a preset the 0 is refused."""
    committed = REPO / "docs" / "study-cpu" / "study.toml"
    assert "prepare_workers = 0" in committed.read_text(encoding="utf-8")
    assert load_study(committed, recorded=True).prepare_workers == THREADS_AUTO
    with pytest.raises(ConfigError, match="^study.prepare_workers: expected a positive integer"):
        load_study(committed)
