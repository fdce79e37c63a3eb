"""A driverInstallCommand that carries a token lives in a Secret: it reaches only the driver
DaemonSet's init container, as the environment variable `erdma driver prepare` reads, and never
the ConfigMap or Helm's release values."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python
import pytest

from erdma.agent.config import build_config
from tests.helm_support import ACCESS_KEY, merge, render
from tests.integration.helm_cases import AGENT, DRIVER

TOKEN_COMMAND = "curl -fsSL -H 'Authorization: Bearer s3cr3t' https://mirror/install.sh | sh"
SECRET = {"agent": {"driverInstallCommandSecret": {"name": "erdma-driver-install"}}}


def test_the_command_comes_from_the_secret_as_the_prepare_containers_env(tmp_path: Path):
    out = render(merge(ACCESS_KEY, SECRET))
    (init,) = out.get("DaemonSet", DRIVER)["spec"]["template"]["spec"]["initContainers"]
    (env,) = [e for e in init["env"] if e["name"] == "ERDMA_DRIVER_INSTALL_COMMAND"]
    assert env["valueFrom"] == {"secretKeyRef": {"name": "erdma-driver-install", "key": "command"}}
    driver_file = tmp_path / "driver.json"
    driver_file.write_text(out.config_file(AGENT, "driver.json"))
    assert "driverInstallCommand" not in json.loads(driver_file.read_text())
    environ = {"NODE_NAME": "node-a", "ERDMA_DRIVER_INSTALL_COMMAND": TOKEN_COMMAND}
    assert build_config(driver_file, environ=environ).driver_install_command == TOKEN_COMMAND


def test_no_container_but_the_prepare_one_sees_it():
    out = render(merge(ACCESS_KEY, SECRET))
    for obj in out.all("DaemonSet") + out.all("Deployment"):
        spec = obj["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            names = [e["name"] for e in container.get("env", [])]
            wanted = obj["metadata"]["name"] == DRIVER and container["name"] == "prepare"
            assert ("ERDMA_DRIVER_INSTALL_COMMAND" in names) == wanted, container["name"]


def test_a_key_of_its_own_is_used():
    out = render(
        merge(
            ACCESS_KEY,
            {
                "agent": {
                    "driverInstallCommandSecret": {
                        "name": "erdma-driver-install",
                        "key": "install.sh",
                    }
                }
            },
        )
    )
    (init,) = out.get("DaemonSet", DRIVER)["spec"]["template"]["spec"]["initContainers"]
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for e in init["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert refs == [{"name": "erdma-driver-install", "key": "install.sh"}]


def test_a_plain_command_and_a_secret_together_are_refused():
    values = merge(ACCESS_KEY, merge(SECRET, {"agent": {"driverInstallCommand": TOKEN_COMMAND}}))
    with pytest.raises(helm_python.HelmRenderError) as err:
        render(values)
    said = str(err.value)
    assert "agent.driverInstallCommand and agent.driverInstallCommandSecret.name=" in said
    assert TOKEN_COMMAND not in said


@pytest.mark.parametrize(
    ("secret", "key"),
    [
        ({"name": "Not_A_Name"}, "name"),
        ({"name": "ok", "key": "a b"}, "key"),
        ({"name": "ok", "other": 1}, "other"),
    ],
)
def test_a_bad_secret_reference_names_the_key(secret, key):
    with pytest.raises(helm_python.HelmError) as err:
        render(merge(ACCESS_KEY, {"agent": {"driverInstallCommandSecret": secret}}))
    assert "driverInstallCommandSecret" in str(err.value) and key in str(err.value)
