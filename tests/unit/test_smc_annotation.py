"""The SMC-R annotation, sysctl paths and CRI socket choice of the agent's SMC-R path."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.agent.smcr import PodNetnsSteps
from erdma.api.names import SMCR_ANNOTATION
from erdma.api.smcr import SmcrError, parse_smcr_annotation
from erdma.host.cri import CRI_SOCKETS, CriSocketNotFound, cri_socket
from erdma.host.netlink.smc_pnet import PnetEntry
from erdma.host.sysctl import SysctlError, Sysctls


class Table:
    """An in-memory pnet table."""

    def __init__(self) -> None:
        self.rows: list[PnetEntry] = []

    async def dump(self) -> list[PnetEntry]:
        return list(self.rows)

    async def add(self, entry: PnetEntry) -> None:
        self.rows.append(entry)


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_parsebool_true_spellings_turn_smcr_on(value):
    assert parse_smcr_annotation(value) is True


@pytest.mark.parametrize("value", [None, "0", "f", "F", "FALSE", "false", "False"])
def test_absent_or_false_spellings_leave_smcr_off(value):
    assert parse_smcr_annotation(value) is False


@pytest.mark.parametrize("value", ["yes", "y", "on", "tRue", "2", " true", "true "])
def test_other_values_are_errors_naming_the_value_and_the_choices(value):
    with pytest.raises(SmcrError) as info:
        parse_smcr_annotation(value)
    message = str(info.value)
    assert f"invalid value {value!r} for annotation {SMCR_ANNOTATION}" in message
    assert "1, t, T, TRUE, true, True (on)" in message
    assert "0, f, F, FALSE, false, False (off)" in message


def test_sysctl_overrides_apply_to_their_prefix_only(tmp_path):
    sysctls = Sysctls(Path("/proc"), {"net.smc": tmp_path})
    assert sysctls.path("net.smc.tcp2smc") == tmp_path / "sys/net/smc/tcp2smc"
    assert sysctls.path("net.smcx.other") == Path("/proc/sys/net/smcx/other")
    assert sysctls.path("net.ipv6.conf.all.disable_ipv6") == Path(
        "/proc/sys/net/ipv6/conf/all/disable_ipv6"
    )


def test_sysctl_write_failure_names_key_value_and_path(tmp_path):
    with pytest.raises(SysctlError, match=r"cannot set net.smc.tcp2smc=1 at .*sys/net/smc/tcp2smc"):
        Sysctls(tmp_path).write("net.smc.tcp2smc", "1")


async def test_pod_steps_fail_as_smcr_errors_with_the_sysctl_message(tmp_path):
    """A knob that cannot be written fails the container start, saying which knob and where."""
    (tmp_path / "sys/net/smc/tcp2smc").mkdir(parents=True)
    steps = PodNetnsSteps(Sysctls(tmp_path), pnet_for=lambda _ns: Table())
    with pytest.raises(SmcrError, match=r"^cannot set net.smc.tcp2smc=1 at .*sys/net/smc/tcp2smc"):
        await steps.apply(None, "00163E2F3775")


def test_configured_cri_socket_wins(tmp_path):
    assert cri_socket("/custom/cri.sock", tmp_path) == Path("/custom/cri.sock")


def test_first_present_cri_socket_candidate_is_used(tmp_path):
    for candidate in CRI_SOCKETS[1:3]:
        (tmp_path / candidate.lstrip("/")).parent.mkdir(parents=True)
        (tmp_path / candidate.lstrip("/")).touch()
    assert cri_socket(None, tmp_path) == tmp_path / CRI_SOCKETS[1].lstrip("/")


@pytest.mark.parametrize("runtime", CRI_SOCKETS)
def test_each_runtime_socket_is_found_alone(tmp_path, runtime):
    """containerd, k3s' containerd, cri-dockerd and CRI-O, each the only runtime on a node."""
    (tmp_path / runtime.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / runtime.lstrip("/")).touch()
    assert cri_socket(None, tmp_path) == tmp_path / runtime.lstrip("/")


def test_no_cri_socket_lists_what_was_tried_and_names_the_setting(tmp_path):
    with pytest.raises(CriSocketNotFound, match=r"no CRI socket found.*containerd\.sock") as exc:
        cri_socket(None, tmp_path)
    assert "RUNTIME_SOCK" in str(exc.value) and "agent.runtimeSocket" in str(exc.value)


async def test_kernel_without_ipv6_still_gets_smc_r(tmp_path):
    """A node booted with ipv6.disable=1 has no disable_ipv6 knob: nothing to turn off."""
    knob = tmp_path / "sys/net/smc/tcp2smc"
    knob.parent.mkdir(parents=True)
    knob.write_text("0")
    table = Table()
    steps = PodNetnsSteps(Sysctls(tmp_path), pnet_for=lambda _ns: table)
    await steps.apply(None, "00163E2F3775")
    assert knob.read_text() == "1"
    assert [(r.pnetid, r.ethname) for r in table.rows] == [("00163E2F3775", "eth0")]
