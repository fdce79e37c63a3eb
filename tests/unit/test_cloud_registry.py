"""Cloud providers are found by name; a name no provider has is refused, clearly."""

from __future__ import annotations

import pytest

from erdma.controller.config import ConfigError
from erdma.controller.registry import DEFAULT_PROVIDER, PROVIDERS, lookup


def test_unknown_provider_names_the_key_the_value_and_the_accepted_names():
    with pytest.raises(ConfigError) as info:
        lookup("gce")
    assert str(info.value) == ("cloud provider 'gce' is not known; accepted: ecs")


def test_existing_configurations_keep_running_on_ecs():
    assert DEFAULT_PROVIDER == "ecs"
    assert lookup(DEFAULT_PROVIDER).__module__ == PROVIDERS["ecs"]
