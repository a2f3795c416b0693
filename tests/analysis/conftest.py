import pytest

from safetyrepro.tasks.envelope import default_rules


@pytest.fixture(scope="session")
def rules():
    return default_rules()
