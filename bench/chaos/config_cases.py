"""The bad configurations `config_faults` starts the real programs with, one row each.

A row gives the config file (YAML unless its suffix says JSON), extra flags and environment,
an optional change to the scratch directory first, and what the one error line must name.
``{dir}`` in flags and needles is the row's scratch directory, ``{config}`` its config file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Program = Literal["agent", "controller"]
BILLION_LAUGHS = (
    "a: &a ["
    + ", ".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
)


@dataclass(frozen=True)
class ConfigCase:
    name: str
    program: Program
    needles: tuple[str, ...]  # what the error line must contain: the key or the file
    file: str | bytes | None = None
    suffix: str = ".yaml"
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # given the scratch directory
    without_dac_override: bool = False  # a mode-000 file must refuse root too

    def sets(self, key: str, flag: str, env: str) -> bool:
        """Whether the row sets this setting itself (then the harmless default is left out:
        flags override the environment, which overrides the file)."""
        text = self.file.decode(errors="replace") if isinstance(self.file, bytes) else self.file
        return key in (text or "") or flag in self.args or env in self.env


def _file_at(rel: str, text: str = "") -> Callable[[Path], None]:
    def make(scratch: Path) -> None:
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        (scratch / rel).write_text(text)

    return make


def _config_dir(scratch: Path) -> None:
    (scratch / "config.yaml").mkdir()


def _config_unreadable(scratch: Path) -> None:
    (scratch / "config.yaml").write_text("slotsPerDevice: 4\n")
    os.chmod(scratch / "config.yaml", 0)


def agent_file(name: str, text: str | bytes, *needles: str, suffix: str = ".yaml") -> ConfigCase:
    return ConfigCase(name, "agent", needles or ("{config}",), file=text, suffix=suffix)


def controller_file(name: str, text: str | bytes, *needles: str) -> ConfigCase:
    return ConfigCase(name, "controller", (*needles, "{config}"), file=text, suffix=".json")


WRONG_TYPES = [
    agent_file(f"{key}: {value} (wrong type)", f"{key}: {value}\n", key.split(":")[0])
    for key, value in [
        ("slotsPerDevice", "true"),
        ("slotsPerDevice", "'ten'"),
        ("rescanInterval", "'1'"),
        ("metricsPort", "'9000'"),
        ("allocateAllDevices", "'yes'"),
        ("allocateAllDevices", "1"),
        ("localERIDiscovery", "'true'"),
        ("jumboFrameMTU", "8500.0"),
        ("exposedLocalERIs", "[1]"),
        ("resources", "5"),
        ("nodeName", "5"),
        ("nccl", "[]"),
        ("prestartContainer", "1"),
        ("hostNamespace", "'false'"),
        ("sharedResources", "{name: rdma/hca}"),
    ]
] + [
    agent_file("nccl.enabled: 'yes'", "nccl: {enabled: 'yes'}\n", "nccl.enabled"),
    agent_file(
        "sharedResources capacity: true",
        "sharedResources: [{capacity: true}]\n",
        "sharedResources.0.capacity",
    ),
    agent_file("dra.enabled: 'on'", "dra: {enabled: 'on'}\n", "dra.enabled"),
]

OUT_OF_RANGE = [
    agent_file(f"{key}: {value} (out of range)", f"{key}: {value}\n", key)
    for key, value in [
        ("slotsPerDevice", "0"),
        ("slotsPerDevice", "10001"),
        ("rescanInterval", "0"),
        ("rescanInterval", "61"),
        ("metricsPort", "70000"),
        ("metricsPort", "-1"),
        ("jumboFrameMTU", "100"),
        ("jumboFrameMTU", "9001"),
        ("preferDriver", "fast"),
        ("watchMode", "fanotify"),
        ("logLevel", "loud"),
        ("deviceListStrategy", "env"),
        ("version", "v2"),
        ("resources", "[gpu]"),
        ("kubeletDir", "relative/kubelet"),
        ("runtimeSocket", "unix:///run/c.sock"),
    ]
] + [
    agent_file(name, text, key)
    for name, text, key in [
        ("nccl.gidIndex: 300", "nccl: {gidIndex: 300}\n", "nccl.gidIndex"),
        ("capacity: 0", "sharedResources: [{capacity: 0}]\n", "sharedResources.0.capacity"),
        ("capacity: 100001", "sharedResources: [{capacity: 100001}]\n", "capacity"),
        ("shared name with a space", "sharedResources: [{name: Bad Name}]\n", "name"),
        (
            "requiredCharDevices: [gpu]",
            "sharedResources: [{requiredCharDevices: [gpu]}]\n",
            "requiredCharDevices",
        ),
        ("dra.unhealthy: explode", "dra: {unhealthy: explode}\n", "dra.unhealthy"),
    ]
]

UNKNOWN_KEYS = [
    agent_file("unknown key slotPerDevice", "slotPerDevice: 3\n", "slotPerDevice"),
    agent_file("unknown nccl key", "nccl: {gidIndx: 1}\n", "gidIndx"),
    agent_file("unknown selector key", "sharedResources: [{selectors: {colour: red}}]\n", "colour"),
    agent_file("unknown dra key", "dra: {bogus: 1}\n", "bogus"),
]

PATTERNS = [
    agent_file(name, text, key)
    for name, text, key in [
        (
            "unbalanced glob in exposedLocalERIs",
            "localERIDiscovery: true\nexposedLocalERIs: ['i-* erdma_[0']\n",
            "erdma_[0",
        ),
        (
            "three words in exposedLocalERIs",
            "exposedLocalERIs: ['i-abc erdma_0 erdma_1']\n",
            "exposedLocalERIs",
        ),
        ("no instance in exposedLocalERIs", "exposedLocalERIs: ['erdma_0']\n", "exposedLocalERIs"),
        (
            "unbalanced ibdevNames glob",
            "sharedResources: [{selectors: {ibdevNames: ['mlx5_[0']}}]\n",
            "ibdevNames",
        ),
        (
            "empty netdevNames glob",
            "sharedResources: [{selectors: {netdevNames: ['']}}]\n",
            "netdevNames",
        ),
        ("vendor not hex", "sharedResources: [{selectors: {vendors: [zz]}}]\n", "vendors"),
        (
            "device id too long",
            "sharedResources: [{selectors: {deviceIDs: ['12345']}}]\n",
            "deviceIDs",
        ),
    ]
]

PATHS = [
    ConfigCase(
        "kubeletDir is a file", "agent", ("kubeletDir", "{dir}/kubelet"), setup=_file_at("kubelet")
    ),
    ConfigCase(
        "kubeletDir under a file",
        "agent",
        ("kubeletDir", "{dir}/kubelet"),
        args=("--kubelet-dir", "{dir}/kubelet/root"),
        setup=_file_at("kubelet"),
    ),
    ConfigCase(
        "kubeconfig missing",
        "agent",
        ("kubeconfig", "{dir}/none"),
        args=("--kubeconfig", "{dir}/none"),
    ),
    ConfigCase(
        "kubeconfig a directory", "agent", ("kubeconfig", "{dir}"), args=("--kubeconfig", "{dir}")
    ),
    agent_file("dra on without a node name", "dra: {enabled: true}\n", "dra.enabled"),
]

FILES = [
    ConfigCase(
        "config file missing",
        "agent",
        ("{dir}/absent.yaml",),
        args=("--config", "{dir}/absent.yaml"),
    ),
    ConfigCase(
        "config file a directory",
        "agent",
        ("{dir}/config.yaml",),
        args=("--config", "{dir}/config.yaml"),
        setup=_config_dir,
    ),
    ConfigCase(
        "config file unreadable (EACCES)",
        "agent",
        ("{dir}/config.yaml",),
        args=("--config", "{dir}/config.yaml"),
        setup=_config_unreadable,
        without_dac_override=True,
    ),
    agent_file("config not UTF-8", b"preferDriver: \xff\xfe\n", "{config}", "UTF-8"),
    agent_file("config over 1 MiB", "# " + "x" * (1 << 20) + "\n", "{config}"),
    agent_file("config a list", "- a\n", "{config}"),
    agent_file("config a scalar", "hello\n", "{config}"),
    agent_file("config broken YAML", "a: [b\n", "{config}"),
    agent_file("config broken JSON", "{nope", "{config}", suffix=".json"),
    agent_file(
        "JSON nested 100000 deep", "[" * 100_000 + "]" * 100_000, "{config}", suffix=".json"
    ),
    agent_file("YAML nested 100000 deep", "a: " + "[" * 100_000 + "]" * 100_000 + "\n", "{config}"),
    agent_file("YAML alias bomb", BILLION_LAUGHS + "exposedLocalERIs: *i\n", "{config}", "alias"),
    agent_file("YAML alias to itself", "a: &a [*a]\n", "{config}"),
    agent_file("YAML python tag", "a: !!python/object/apply:os.system ['true']\n", "{config}"),
    agent_file(
        "a huge bad value",
        '{"exposedLocalERIs": [' + ", ".join(['"bad"'] * 20000) + "]}",
        "exposedLocalERIs",
        suffix=".json",
    ),
]

ENVIRONMENT = [
    ConfigCase(f"env {name}={value}", "agent", (key,), env={name: value})
    for name, value, key in [
        ("ERDMA_SLOTS_PER_DEVICE", "abc", "slotsPerDevice"),
        ("ERDMA_PREFER_DRIVER", "rdma", "preferDriver"),
        ("ERDMA_RESCAN_INTERVAL", "-1", "rescanInterval"),
        ("ERDMA_METRICS_PORT", "99999", "metricsPort"),
        ("ERDMA_ALLOCATE_ALL_DEVICES", "maybe", "allocateAllDevices"),
        ("ERDMA_RESOURCES", "gpu", "resources"),
    ]
]

FLAGS = [
    ConfigCase(f"flag {flag} {value}", "agent", (flag,), args=(flag, value))
    for flag, value in [
        ("--slots-per-device", "0"),
        ("--slots-per-device", "abc"),
        ("--prefer-driver", "fast"),
        ("--kubelet-dir", "relative"),
        ("--watch-mode", "xyz"),
        ("--log-level", "loud"),
        ("--exposed-local-eris", "i-abc erdma_0 erdma_1"),
        ("--rescan-interval", "soon"),
    ]
]

CONTROLLER = [
    ConfigCase(
        "controller config missing",
        "controller",
        ("{dir}/absent.json",),
        args=("--config-path", "{dir}/absent.json"),
    ),
    ConfigCase(
        "controller config a directory", "controller", ("{dir}",), args=("--config-path", "{dir}")
    ),
    controller_file("controller config broken JSON", '{"region": "cn-hangzhou",}'),
    controller_file("controller config not UTF-8", b'{"region": "\xff"}', "UTF-8"),
    controller_file("controller config a list", "[]"),
    controller_file("controller config nested 100000 deep", "[" * 100_000 + "]" * 100_000),
    controller_file("controller unknown key", '{"nodeSelecter": {}}', "nodeSelecter"),
    controller_file(
        "controller negative timeout",
        '{"waitNodeReadyTimeoutSeconds": -5}',
        "waitNodeReadyTimeoutSeconds",
    ),
    controller_file("controller ecsProtocol FTP", '{"ecsProtocol": "FTP"}', "ecsProtocol"),
    controller_file("controller healthPort 70000", '{"healthPort": 70000}', "healthPort"),
    controller_file("controller bad region", '{"region": "Hangzhou"}', "region"),
    controller_file("controller nodeSelector a list", '{"nodeSelector": ["a=b"]}', "nodeSelector"),
    controller_file(
        "controller label value a number", '{"nodeSelector": {"a": 1}}', "nodeSelector.a"
    ),
    ConfigCase(
        "controller kubeconfig missing",
        "controller",
        ("kubeconfig", "{dir}/none"),
        file='{"region": "cn-hangzhou"}',
        suffix=".json",
        args=("--kubeconfig", "{dir}/none"),
    ),
    *(
        ConfigCase(
            name,
            "controller",
            needles,
            file='{"region": "cn-hangzhou"}',
            suffix=".json",
            setup=_file_at("credential.json", text),
        )
        for name, text, needles in [
            ("controller credential.json broken", "{nope", ("{dir}/credential.json",)),
            ("controller credential.json a list", "[]", ("{dir}/credential.json",)),
            ("controller no AccessKey anywhere", "{}", ("access_key",)),
        ]
    ),
    ConfigCase(
        "controller no region, metadata unreachable",
        "controller",
        ("region",),
        file="{}",
        suffix=".json",
    ),
]

CASES: list[ConfigCase] = [
    *WRONG_TYPES,
    *OUT_OF_RANGE,
    *UNKNOWN_KEYS,
    *PATTERNS,
    *PATHS,
    *FILES,
    *ENVIRONMENT,
    *FLAGS,
    *CONTROLLER,
]
SAMPLE = (  # short mode: one of each kind
    "slotsPerDevice: true (wrong type)",
    "kubeletDir is a file",
    "config not UTF-8",
    "YAML alias bomb",
    "controller config not UTF-8",
)
