"""The Hypothesis profile the suite loads (tests/conftest.py) reaches the tests that set
their own example counts (``helpers.examples``)."""

import os

from hypothesis import settings

from .helpers import examples


def test_explicit_counts_scale_with_the_loaded_profile():
    """``examples(10)`` is the loaded profile's count (6 under ``ci``, 44 under ``full``);
    computed when helpers.py was imported, before conftest loaded the profile, it was
    Hypothesis's default of 100 in every profile."""
    profile = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    assert settings().max_examples == profile.max_examples
    assert examples(10) == max(2, profile.max_examples)
    assert examples(5) == max(2, round(profile.max_examples / 2))
