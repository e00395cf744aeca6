"""The GPU campaign's config (lab/bench/campaign/config.py) layers like every other: a table given
for a field whose default_factory tunes it (the long-context part's per-family models) keeps what
the factory set for the keys an override leaves out."""

from tokendrop.lab.bench.campaign.config import campaign_config


def test_an_override_layers_over_the_campaigns_tuned_defaults():
    lc = campaign_config("gpu", ["longctx.bert.num_layers=4"]).longctx
    assert (lc.bert.model, lc.bert.num_layers, lc.bert.vocab_size, lc.device) == (
        "bert-base",
        4,
        30522,
        "cuda",
    )
