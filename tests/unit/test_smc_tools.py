"""`erdma smc sockets|status` and `erdma smcr-init` as a person runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.api.names import SMCR_ANNOTATION
from erdma.host.netlink.smc_diag import LinkInfo, SmcSocket
from erdma.host.netlink.smc_pnet import PnetEntry
from erdma.host.run import RecordingRunner
from erdma.tools.smc import SmcAccess, smc_group
from erdma.tools.smcr_init import smcr_init_command
from tests.fakes.smckernel import FakeSmcKernel


def sock(state: int, mode: int, reason: int = 0, port: int = 5201) -> SmcSocket:
    link = LinkInfo(1, "erdma_0", 1, "fe80::1", "fe80::2", 0) if mode == 0 else None
    return SmcSocket(
        state=state,
        mode=mode,
        shutdown=0,
        local=("10.0.0.5", port),
        peer=("10.0.0.6", 40000) if state != 10 else ("0.0.0.0", 0),
        ifindex=2,
        uid=0,
        inode=31337,
        fallback_reason=reason,
        link=link,
    )


def run_smc(kernel: FakeSmcKernel, *args: str):
    access = SmcAccess(diag_transport=kernel.diag_transport)
    return CliRunner().invoke(smc_group, list(args), obj=access)


@pytest.fixture
def kernel() -> FakeSmcKernel:
    k = FakeSmcKernel()
    k.sockets[k.init_netns] = [
        sock(10, 1, port=5201),
        sock(1, 0, port=5201),
        sock(1, 1, reason=0x03010000, port=5202),
        sock(1, 1, reason=0x03030002, port=5203),
    ]
    return k


def test_sockets_lists_connections_like_smcss(kernel):
    result = run_smc(kernel, "sockets")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "State",
        "UID",
        "Inode",
        "Local",
        "Address",
        "Peer",
        "Address",
        "Intf",
        "Mode",
    ]
    assert lines[1].split() == [
        "ACTIVE",
        "00000",
        "0031337",
        "10.0.0.5:5201",
        "10.0.0.6:40000",
        "0002",
        "SMCR",
    ]
    assert lines[2].split()[-2:] == ["TCP", "0x03010000"]
    assert not any(line.startswith("LISTEN") for line in lines)


def test_sockets_all_and_listening_filters(kernel):
    everything = run_smc(kernel, "sockets", "-a").output.splitlines()
    listening = run_smc(kernel, "sockets", "-l").output.splitlines()
    assert len(everything) == 5
    assert [line.split()[0] for line in listening[1:]] == ["LISTEN"]


def test_status_says_smcr_is_active_and_explains_each_fallback(kernel):
    result = run_smc(kernel, "status", "--proc-root", "/nonexistent")
    assert result.exit_code == 0, result.output
    assert "SMC-R is active: 1 connection(s) use RDMA over erdma_0 port 1" in result.output
    assert (
        "1 fell back with 0x03010000: peer did not indicate SMC: both client and server pods "
        f'need the annotation {SMCR_ANNOTATION}: "true"'
    ) in result.output
    assert "0x03030002: no SMC-R device: check the pnet entries" in result.output
    assert "RDMA netns mode is shared" in result.output


def test_status_when_everything_fell_back(tmp_path):
    kernel = FakeSmcKernel()
    kernel.sockets[kernel.init_netns] = [sock(1, 1, reason=0x03070000)]
    (tmp_path / "sys/net/smc").mkdir(parents=True)
    (tmp_path / "sys/net/smc/tcp2smc").write_text("1\n")
    result = run_smc(kernel, "status", "--proc-root", str(tmp_path))
    assert "net.smc.tcp2smc: 1" in result.output
    assert "SMC-R is not active: every connection fell back to TCP" in result.output
    assert "IP prefix / subnet mismatch" in result.output


def test_status_reports_missing_tcp2smc_knob(tmp_path):
    (tmp_path / "sys/net/smc").mkdir(parents=True)
    result = run_smc(FakeSmcKernel(), "status", "--proc-root", str(tmp_path))
    assert "net.smc.tcp2smc: unavailable" in result.output
    assert "no SMC connections in this namespace" in result.output


def test_kernel_without_smc_diag_fails_clearly_through_the_fake(kernel):
    kernel.diag_loaded = False
    result = run_smc(kernel, "status")
    assert result.exit_code == 1
    assert "SMC socket diagnostics are not available" in result.output
    assert "modprobe smc_diag" in result.output


@pytest.mark.skipif(Path("/sys/module/smc_diag").exists(), reason="this kernel has smc_diag")
def test_real_kernel_without_smc_diag_fails_clearly():
    result = CliRunner().invoke(smc_group, ["sockets"])
    assert result.exit_code == 1
    assert "modprobe smc_diag" in result.output


def test_netns_that_does_not_exist_is_named(kernel):
    result = run_smc(kernel, "sockets", "--netns", "/var/run/netns/nope")
    assert result.exit_code == 2
    assert "/var/run/netns/nope" in result.output


# --- smcr-init -------------------------------------------------------------------------------


def proc_tree(root: Path, tcp2smc: bool = True) -> Path:
    (root / "sys/net/smc").mkdir(parents=True)
    (root / "sys/net/ipv6/conf/all").mkdir(parents=True)
    (root / "sys/net/ipv6/conf/all/disable_ipv6").write_text("0\n")
    if tcp2smc:
        (root / "sys/net/smc/tcp2smc").write_text("0\n")
    return root


def smcr_init(kernel: FakeSmcKernel, proc: Path, *args: str, env: dict[str, str] | None = None):
    access = SmcAccess(
        genl_transport=kernel.genl_transport, runner=RecordingRunner(handlers=[kernel.smc_pnet])
    )
    argv = ["--proc-root", str(proc), *args]
    return CliRunner().invoke(smcr_init_command, argv, obj=access, env=env or {})


def test_smcr_init_sets_everything_from_smcr_pnet(tmp_path):
    kernel = FakeSmcKernel()
    proc = proc_tree(tmp_path)
    result = smcr_init(kernel, proc, env={"SMCR_PNET": "00163e2f3775"})
    assert result.exit_code == 0, result.output
    assert "eth0 uses PNETID 00163E2F3775" in result.output
    assert (proc / "sys/net/smc/tcp2smc").read_text() == "1"
    assert (proc / "sys/net/ipv6/conf/all/disable_ipv6").read_text() == "1"
    assert kernel.dump(kernel.init_netns) == [PnetEntry("00163E2F3775", ethname="eth0")]


def test_smcr_init_twice_adds_once_and_keep_ipv6_is_honoured(tmp_path):
    kernel = FakeSmcKernel()
    proc = proc_tree(tmp_path)
    env = {"SMCR_PNET": "00163E2F3775"}
    smcr_init(kernel, proc, "--keep-ipv6", env=env)
    again = smcr_init(kernel, proc, "--keep-ipv6", env=env)
    assert again.exit_code == 0, again.output
    assert "already present 1" in again.output
    assert (proc / "sys/net/ipv6/conf/all/disable_ipv6").read_text() == "0\n"


def test_smcr_init_without_smcr_pnet_explains_where_it_comes_from(tmp_path):
    result = smcr_init(FakeSmcKernel(), proc_tree(tmp_path))
    assert result.exit_code == 2
    assert "SMCR_PNET is not set" in result.output
    assert "aliyun/erdma" in result.output


def test_smcr_init_on_alinux4_says_smcr_is_unsupported(tmp_path):
    proc = proc_tree(tmp_path, tcp2smc=False)
    result = smcr_init(FakeSmcKernel(), proc, env={"SMCR_PNET": "ABC"})
    assert result.exit_code == 1
    assert "SMC-R is not supported on this kernel (net.smc.tcp2smc unavailable" in result.output
    assert (proc / "sys/net/ipv6/conf/all/disable_ipv6").read_text() == "0\n"


def test_smcr_init_rejects_a_malformed_pnetid(tmp_path):
    result = smcr_init(FakeSmcKernel(), proc_tree(tmp_path), "--pnetid", "00:16:3e:2f:37:75")
    assert result.exit_code == 1
    assert "invalid PNETID '00:16:3e:2f:37:75'" in result.output


def test_smcr_init_without_smc_module_says_so(tmp_path):
    result = smcr_init(FakeSmcKernel(smc_loaded=False), proc_tree(tmp_path), "--pnetid", "ABC")
    assert result.exit_code == 1
    assert "SMC module not loaded" in result.output


def test_smcr_init_without_smc_sysctls_says_smc_is_not_loaded(tmp_path):
    proc = proc_tree(tmp_path)
    (proc / "sys/net/smc/tcp2smc").unlink()
    (proc / "sys/net/smc").rmdir()
    result = smcr_init(FakeSmcKernel(), proc, "--pnetid", "ABC")
    assert result.exit_code == 1
    assert "SMC is not loaded on this node" in result.output
    assert "sys/net/smc is absent" in result.output
