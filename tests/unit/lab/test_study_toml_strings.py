"""Every string a study config holds reads back from the study.toml tokendrop writes."""

import tomllib

import pytest
from config_strings import HOSTILE, string_fields

from tokendrop.config import to_dict, to_toml
from tokendrop.lab.study.spec import StudyConfig


@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_string_field_of_a_study_round_trips(hostile):
    cfg = StudyConfig()
    fields = list(string_fields(cfg))
    assert fields
    for obj, name, is_list, _ in fields:
        object.__setattr__(obj, name, [hostile, "plain"] if is_list else hostile)
    assert tomllib.loads(to_toml(cfg)) == to_dict(cfg)
