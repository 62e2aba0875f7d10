"""MIG profiles count by compute slices, out of seven."""

import pytest

from core.mig import MIG_COMPUTE_SLICES, mig_slices


@pytest.mark.parametrize(
    ("profile", "slices"),
    [("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 3), ("7g.80gb", 7), ("1g.10gb+me", 1)],
)
def test_a_profile_counts_its_compute_slices(profile, slices):
    assert mig_slices(profile) == slices


@pytest.mark.parametrize("profile", ["", "0g.5gb", "8g.90gb", "10g.1gb", "3g", "gpu"])
def test_anything_else_is_not_a_profile(profile):
    assert mig_slices(profile) is None


def test_a_gpu_has_seven_slices():
    assert MIG_COMPUTE_SLICES == 7
