"""The generated kubelet/CRI stubs: wire identity (method paths, field numbers) and freshness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]

from erdma.api.cri.runtime.v1 import api_pb2 as cri
from erdma.api.deviceplugin.v1beta1 import api_pb2 as dp
from erdma.api.drahealth.v1 import api_pb2 as health_v1
from erdma.api.drahealth.v1alpha1 import api_pb2 as health_v1alpha1
from erdma.api.pluginregistration.v1 import api_pb2 as reg
from erdma.api.podresources.v1 import api_pb2 as podres

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "src" / "erdma" / "api"
# the dependency-free contract modules that sit beside the stubs
HAND_WRITTEN = {Path("names.py"), Path("smcr.py")}


def method_paths(module) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


@pytest.mark.parametrize(
    ("module", "path"),
    [
        (dp, "/v1beta1.Registration/Register"),
        (dp, "/v1beta1.DevicePlugin/GetDevicePluginOptions"),
        (dp, "/v1beta1.DevicePlugin/ListAndWatch"),
        (dp, "/v1beta1.DevicePlugin/GetPreferredAllocation"),
        (dp, "/v1beta1.DevicePlugin/Allocate"),
        (dp, "/v1beta1.DevicePlugin/PreStartContainer"),
        (reg, "/pluginregistration.Registration/GetInfo"),
        (reg, "/pluginregistration.Registration/NotifyRegistrationStatus"),
        (podres, "/v1.PodResourcesLister/List"),
        (podres, "/v1.PodResourcesLister/GetAllocatableResources"),
        (podres, "/v1.PodResourcesLister/Get"),
        (cri, "/runtime.v1.RuntimeService/Version"),
        (cri, "/runtime.v1.RuntimeService/ListPodSandbox"),
        (cri, "/runtime.v1.RuntimeService/PodSandboxStatus"),
        (health_v1alpha1, "/v1alpha1.DRAResourceHealth/NodeWatchResources"),
        (health_v1, "/v1.DRAResourceHealth/NodeWatchResources"),
    ],
)
def test_method_path_matches_kubelet(module, path):
    assert path in method_paths(module)


def test_list_and_watch_is_server_streaming():
    method = dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert method.server_streaming and not method.client_streaming


@pytest.mark.parametrize("module", [health_v1alpha1, health_v1])
def test_dra_health_is_a_stream_with_kubelets_status_numbers(module):
    service = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    method = service.methods_by_name["NodeWatchResources"]
    assert method.server_streaming and not method.client_streaming
    assert [module.HealthStatus.Value(n) for n in ("UNKNOWN", "HEALTHY", "UNHEALTHY")] == [0, 1, 2]


def field_number(message, name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


@pytest.mark.parametrize(
    ("message", "name", "number"),
    [
        (dp.RegisterRequest, "options", 4),
        (dp.Device, "ID", 1),
        (dp.Device, "topology", 3),
        (dp.ContainerAllocateRequest, "devices_ids", 1),
        (dp.PreStartContainerRequest, "devices_ids", 1),
        (dp.ContainerPreferredAllocationRequest, "must_include_deviceIDs", 2),
        (dp.ContainerAllocateResponse, "annotations", 4),
        (dp.ContainerAllocateResponse, "cdi_devices", 5),
        (dp.DeviceSpec, "permissions", 3),
        (podres.ContainerResources, "dynamic_resources", 5),
        (podres.ContainerDevices, "topology", 3),
        (podres.DynamicResource, "claim_name", 2),
        (cri.PodSandboxStatusRequest, "verbose", 2),
        (cri.PodSandboxStatusResponse, "info", 2),
        (cri.PodSandboxStatus, "linux", 6),
        (cri.PodSandboxStatus, "annotations", 8),
        (cri.Namespace, "options", 2),
        (cri.PodSandboxFilter, "state", 2),
        (cri.PodSandbox, "labels", 5),
        (health_v1alpha1.DeviceHealth, "health", 2),
        (health_v1alpha1.DeviceHealth, "last_updated_time", 3),
        (health_v1alpha1.DeviceHealth, "health_check_timeout_seconds", 4),
        (health_v1alpha1.DeviceHealth, "message", 5),
        (health_v1.DeviceHealth, "message", 5),
        (health_v1.DeviceIdentifier, "device_name", 2),
    ],
)
def test_field_numbers_match_upstream(message, name, number):
    assert field_number(message, name) == number


def test_dynamic_resource_keeps_removed_field_one_reserved():
    proto = descriptor_pb2.DescriptorProto()
    podres.DynamicResource.DESCRIPTOR.CopyToProto(proto)
    assert [(r.start, r.end) for r in proto.reserved_range] == [(1, 2)]


def test_cri_network_namespace_mode_node_is_two():
    status = cri.PodSandboxStatus()
    status.linux.namespaces.options.network = cri.NODE
    assert cri.NODE == 2
    again = cri.PodSandboxStatus.FromString(status.SerializeToString())
    assert again.linux.namespaces.options.network == cri.NamespaceMode.Value("NODE")


def test_packages_are_kubelets_own():
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert reg.DESCRIPTOR.package == "pluginregistration"
    assert podres.DESCRIPTOR.package == "v1"
    assert cri.DESCRIPTOR.package == "runtime.v1"


def committed_files() -> dict[Path, bytes]:
    return {
        p.relative_to(GENERATED): p.read_bytes()
        for p in GENERATED.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.relative_to(GENERATED) not in HAND_WRITTEN
    }


def test_committed_stubs_match_a_fresh_generation(tmp_path):
    """Fails when a .proto changed without `make stubs` (or a stub was edited by hand)."""
    out = tmp_path / "api"
    subprocess.run(
        [sys.executable, str(REPO / "proto" / "generate.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    fresh = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    committed = committed_files()
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make stubs`"
    stale = [str(rel) for rel in fresh if fresh[rel] != committed[rel]]
    assert stale == [], f"stale generated stubs (run `make stubs`): {stale}"


def test_generator_removes_stubs_of_deleted_protos(tmp_path):
    out = tmp_path / "api"
    orphan = out / "gone" / "v1" / "api_pb2.py"
    orphan.parent.mkdir(parents=True)
    orphan.write_text("# from a .proto that no longer exists\n")
    subprocess.run(
        [sys.executable, str(REPO / "proto" / "generate.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    assert not orphan.exists()
    assert (out / "deviceplugin" / "v1beta1" / "api_pb2_grpc.py").is_file()
