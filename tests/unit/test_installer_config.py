"""`driverInstaller` settings: on by default, off on request, and bad values refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.agent.config import build_config
from erdma.agent.config_file import ConfigError
from erdma.host.installer import CommandInstaller, ReferenceInstaller


def config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(f"version: v1\n{body}\n")
    return path


def test_the_reference_installer_is_on_by_default_with_its_version_and_mirror():
    installer = build_config(environ={}).driver_installer.installer("")
    assert isinstance(installer, ReferenceInstaller)
    assert (installer.settings.version, installer.settings.mirror) == (
        "1.5.9",
        "http://mirrors.cloud.aliyuncs.com/erdma",
    )


def test_pins_and_timeout_reach_the_installer(tmp_path):
    pin = "AB" * 32
    body = f"driverInstaller: {{installerSha256: {pin}, timeoutSeconds: 600, version: 1.4.6}}"
    installer = build_config(config_file(tmp_path, body), environ={}).driver_installer.installer("")
    assert isinstance(installer, ReferenceInstaller)
    assert (installer.settings.installer_sha256, installer.settings.timeout) == (pin, 600.0)
    assert installer.settings.version == "1.4.6"


def test_disabled_means_no_installer_even_with_a_command(tmp_path):
    config = build_config(config_file(tmp_path, "driverInstaller: {enabled: false}"), environ={})
    assert config.driver_installer.installer("install-it") is None


def test_a_command_replaces_the_reference_installer():
    config = build_config(environ={"ERDMA_DRIVER_INSTALL_COMMAND": "install-it"})
    installer = config.driver_installer.installer(config.driver_install_command)
    assert isinstance(installer, CommandInstaller) and installer.command == "install-it"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("installerSha256: abc", "driverInstaller.installerSha256='abc': String should match"),
        ("envSetupSha256: " + "g" * 64, "driverInstaller.envSetupSha256='gggg"),
        ('mirror: "ftp://mirror/erdma"', "driverInstaller.mirror='ftp://mirror/erdma'"),
        ('mirror: "http://mirror/erdma/"', "driverInstaller.mirror='http://mirror/erdma/'"),
        ("timeoutSeconds: 0", "driverInstaller.timeoutSeconds=0: Input should be greater than"),
        ('version: "../../etc"', "driverInstaller.version='../../etc': String should match"),
        ("enabled: 'yes'", "driverInstaller.enabled='yes': Input should be a valid boolean"),
        ("bogus: 1", "driverInstaller.bogus=1: unknown key; accepted keys: enabled, version"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_value(tmp_path, body, said):
    with pytest.raises(ConfigError) as err:
        build_config(config_file(tmp_path, f"driverInstaller: {{{body}}}"), environ={})
    assert said in str(err.value)
