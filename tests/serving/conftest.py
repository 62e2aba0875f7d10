from tests.pages.conftest import (  # noqa: F401  (the browser tests' fixtures)
    browser_login,
    browser_type_launch_args,
    console_errors,
    outside_requests,
)
