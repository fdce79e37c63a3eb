"""The controller loads the official ECS SDK's models one at a time, and they stay the SDK's own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from erdma.controller.providers.ecs import sdk as ecs_sdk
from tests.unit.import_graph import modules_after

SDK_MODELS = "alibabacloud_ecs20140526.models."


def _sdk_init() -> str:
    spec = importlib.util.find_spec(ecs_sdk.MODELS)
    assert spec is not None and spec.origin
    return Path(spec.origin).read_text(encoding="utf-8")


def test_the_controller_imports_only_the_models_it_uses():
    """The SDK's package would import all 1,152 model modules; the controller needs a dozen."""
    modules = modules_after(
        "import erdma.controller.main\n"
        "from erdma.controller.registry import DEFAULT_PROVIDER, lookup\n"
        "lookup(DEFAULT_PROVIDER)\n"  # the provider, loaded by name as at start
    )
    assert "erdma.controller.providers.ecs.client" in modules
    loaded = {m for m in modules if m.startswith(SDK_MODELS)}
    assert len(loaded) < 20, sorted(loaded)


def test_a_request_built_lazily_is_the_sdks_own_class_with_its_wire_names():
    modules = modules_after(
        "from erdma.controller.providers.ecs.client import ecs_models\n"
        "r = ecs_models.DescribeInstancesRequest(region_id='cn-hangzhou',\n"
        "    instance_ids='[\"i-1\"]')\n"
        "assert type(r).__module__ == (\n"
        "    'alibabacloud_ecs20140526.models._describe_instances_request')\n"
        "m = r.to_map()\n"
        "assert (m['RegionId'], m['InstanceIds']) == ('cn-hangzhou', '[\"i-1\"]')\n"
        "tag = ecs_models.DescribeNetworkInterfacesRequestTag(key='k', value='v')\n"
        "assert tag.to_map() == {'Key': 'k', 'Value': 'v'}"
    )
    assert f"{SDK_MODELS}_describe_instances_request" in modules
    assert f"{SDK_MODELS}_run_instances_request" not in modules


def test_every_name_the_sdk_exports_is_found_in_the_file_that_defines_it():
    where = ecs_sdk.model_files(_sdk_init())
    assert len(where) > 2000
    assert where["DescribeInstancesRequest"] == "_describe_instances_request"
    assert where["TagResourcesRequestTag"] == "_tag_resources_request"


def test_an_unknown_name_is_an_attribute_error_naming_it():
    """In a fresh interpreter, so the lazy package answers (not one a test imported whole)."""
    modules_after(
        "import sys\n"
        "from erdma.controller.providers.ecs.client import ecs_models\n"
        "from erdma.controller.providers.ecs.sdk import LazyModels\n"
        "assert isinstance(ecs_models, LazyModels)\n"
        "try:\n"
        "    ecs_models.DescribeNothingRequest\n"
        "except AttributeError as exc:\n"
        "    assert 'DescribeNothingRequest' in str(exc), exc\n"
        "else:\n"
        "    sys.exit('no AttributeError')"
    )


@pytest.mark.parametrize(
    "text",
    [
        "from ._a_request import ARequest\nimport os\n",
        "from ._a_request import (\n    ARequest,\n)\n",
        "from . import everything\n",
    ],
)
def test_a_models_file_of_another_form_is_not_guessed_at(text: str):
    """A future SDK whose package does more than re-export: the package is imported as is."""
    assert ecs_sdk.model_files(text) == {}


def test_comments_the_future_import_and_the_closing_export_list_are_understood():
    text = (
        "# generated\nfrom __future__ import annotations\n\n"
        "from ._a_request import ARequest, ARequestTag\n__all__ = [\n    ARequest,\n]\n"
    )
    assert ecs_sdk.model_files(text) == {"ARequest": "_a_request", "ARequestTag": "_a_request"}


def test_importlib_sees_the_lazy_package_as_the_sdks_models_package():
    """Tools that ask importlib about the package (pkgutil, debuggers) get the SDK's answer."""
    modules_after(
        "import importlib.util, sys\n"
        "import erdma.controller.providers.ecs.client\n"
        "from erdma.controller.providers.ecs.sdk import MODELS, LazyModels\n"
        "assert isinstance(sys.modules[MODELS], LazyModels)\n"
        "spec = importlib.util.find_spec(MODELS)\n"
        "assert spec.name == MODELS and spec.origin.endswith('models/__init__.py')"
    )
