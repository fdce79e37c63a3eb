"""The `driverInstaller` settings: whether and how the agent installs a missing eRDMA driver.

On by default, as in the reference agent, so a node without the driver gets it on day one; a
platform whose node images carry the driver turns it off. The checksums let a cautious team pin
exactly the installer it reviewed: a pinned file that differs is never run.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from erdma.host.driver import DriverInstaller
from erdma.host.installer import (
    DEFAULT_MIRROR,
    DEFAULT_VERSION,
    CommandInstaller,
    InstallerSettings,
    ReferenceInstaller,
)
from erdma.settings import ChartValue

_SHA256 = r"^([0-9a-fA-F]{64})?$"


class DriverInstallerConfig(BaseModel):
    """Alibaba Cloud's eRDMA installer, run in the host's namespaces when erdma is missing."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    enabled: Annotated[bool, ChartValue("agent.driverInstaller.enabled")] = Field(
        True, description="install the driver when the erdma module is missing"
    )
    version: Annotated[str, ChartValue("agent.driverInstaller.version")] = Field(
        DEFAULT_VERSION,
        pattern=r"^[0-9A-Za-z][0-9A-Za-z._-]*$",
        description="erdma_installer-<version>.tar.gz (default/compat; ofed uses env_setup.sh)",
    )
    mirror: Annotated[str, ChartValue("agent.driverInstaller.mirror")] = Field(
        DEFAULT_MIRROR,
        pattern=r"^https?://[^\s'\"]+[^/\s'\"]$",
        description="base URL of the eRDMA packages (no trailing slash)",
    )
    installer_sha256: Annotated[
        str,
        ChartValue(
            "agent.driverInstaller.installerSha256",
            description="sha256 the installer tarball must have; empty: not checked, and a Warning "
            "Event on the Node names the value to set",
        ),
    ] = Field(
        "",
        alias="installerSha256",
        pattern=_SHA256,
        description="sha256 the installer tarball must have; empty: logged, not checked",
    )
    env_setup_sha256: Annotated[str, ChartValue("agent.driverInstaller.envSetupSha256")] = Field(
        "",
        alias="envSetupSha256",
        pattern=_SHA256,
        description="sha256 env_setup.sh (ofed) must have; empty: logged, not checked",
    )
    timeout_seconds: Annotated[int, ChartValue("agent.driverInstaller.timeoutSeconds")] = Field(
        1800, alias="timeoutSeconds", ge=10, le=86400, description="time for the whole install"
    )

    def installer(self, command: str) -> DriverInstaller | None:
        """The installer to run, if any: `driverInstallCommand` when set, else the reference's."""
        if not self.enabled:
            return None
        if command:
            return CommandInstaller(command, float(self.timeout_seconds))
        return ReferenceInstaller(
            InstallerSettings(
                version=self.version,
                mirror=self.mirror,
                installer_sha256=self.installer_sha256,
                env_setup_sha256=self.env_setup_sha256,
                timeout=float(self.timeout_seconds),
            )
        )
