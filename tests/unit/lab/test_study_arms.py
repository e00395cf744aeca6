"""The study's arms (lab/study/spec.py ``ARMS``) agree with the method registry: an arm counts as
dropping exactly when its ``drop.method`` drops tokens or its ``drop.variant`` pools."""

from tokendrop.dropping import methods
from tokendrop.lab.study.spec import ARMS


def test_an_arm_drops_exactly_when_its_method_does():
    assert ARMS
    for arm in ARMS.values():
        method = next(
            (o.split("=", 1)[1] for o in arm.overrides if o.startswith("drop.method=")), "none"
        )
        variant = next(
            (o.split("=", 1)[1] for o in arm.overrides if o.startswith("drop.variant=")), "drop"
        )
        assert arm.dropping == (methods.METHODS[method].drops or methods.VARIANTS[variant].pools), (
            arm.name
        )
