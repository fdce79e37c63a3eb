"""Start the programs' configuration parsing on a rendered chart, as the pods would at start:
the container's arguments, the mounted ConfigMap file and, for the controller, credential.json
(RRSA's environment is what ACK's pod identity webhook injects)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from erdma.agent.config import AgentConfig, build_config
from erdma.agent.driver_main import prepare_command
from erdma.agent.main import agent_command
from erdma.controller.config import ControllerConfig, load_config
from erdma.controller.main import controller_command
from erdma.controller.providers.ecs.credentials import CredentialSettings, build_credential_client
from tests.helm_support import Rendered
from tests.integration.helm_cases import AGENT, CONTROLLER, DRIVER, NODE_A, mounted_agent_config

RRSA_ENV = {
    "ALIBABA_CLOUD_ROLE_ARN": "acs:ram::1:role/erdma",
    "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": "acs:ram::1:oidc-provider/ack",
    "ALIBABA_CLOUD_OIDC_TOKEN_FILE": "/var/run/secrets/ack/token",
}


def agent_loads(out: Rendered, name: str, tmp_path: Path) -> AgentConfig:
    """`erdma agent` with the DaemonSet's arguments and the mounted ConfigMap file."""
    container = out.container("DaemonSet", name)
    args = [str(a) for a in container["args"][1:]]
    ctx = agent_command.make_context("agent", args)
    mounted = mounted_agent_config(out, name, tmp_path, Path(ctx.params.pop("config_file")).name)
    return build_config(mounted, environ=NODE_A, flags=ctx.params)


#: the settings node preparation uses: the driver DaemonSet's, where the chart renders one
PREPARATION = ("prepare_node", "host_namespace", "driver_installer", "driver_install_command")


def node_loads(out: Rendered, tmp_path: Path) -> AgentConfig:
    """The agent's settings with the node preparation the node gets: the agent's own (charts
    before the driver DaemonSet) or `erdma driver prepare`'s, from its init container's
    arguments and mounted file."""
    agent = agent_loads(out, AGENT, tmp_path / "agent")
    if out.find("DaemonSet", DRIVER) is None:
        return agent
    (init,) = out.get("DaemonSet", DRIVER)["spec"]["template"]["spec"]["initContainers"]
    args = [str(a) for a in init["args"][2:]]
    ctx = prepare_command.make_context("prepare", args)
    name = Path(ctx.params.pop("config_file")).name
    ctx.params.pop("state_file")
    mounted = tmp_path / "driver" / name
    mounted.parent.mkdir(parents=True, exist_ok=True)
    mounted.write_text(out.config_file(AGENT, name))
    driver = build_config(mounted, environ=NODE_A, flags=ctx.params)
    return agent.model_copy(update={key: getattr(driver, key) for key in PREPARATION})


def controller_loads(
    out: Rendered, tmp_path: Path, env: Mapping[str, str] = RRSA_ENV
) -> ControllerConfig:
    """`erdma controller` with the Deployment's arguments, config.json and credential.json;
    ``env`` stands for what the pod's environment adds (RRSA's, or an existingSecret's keys)."""
    args = [str(a) for a in out.container("Deployment", CONTROLLER)["args"][1:]]
    ctx = controller_command.make_context("controller", args)
    config = tmp_path / "config.json"
    config.write_text(out.config_file(CONTROLLER, Path(ctx.params["config_path"]).name))
    credential = tmp_path / "credential.json"
    key = Path(ctx.params["credential_path"]).name
    credential.write_text(json.dumps(out.secret_json(f"{CONTROLLER}-credential", key)))
    build_credential_client(CredentialSettings.from_file(credential), env=env)
    return load_config(config)
