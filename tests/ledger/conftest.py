"""The generated fleets in a real Prometheus (tests/fleet/conftest.py), for the tests here."""

from tests.fleet.conftest import (  # noqa: F401
    alpha_fleet,
    alpha_prometheus,
    beta_fleet,
    beta_prometheus,
)
