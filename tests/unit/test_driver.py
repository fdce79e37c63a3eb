"""Driver modes on fixture hosts: reading the loaded mode, choosing one, switching between them.

Commands run through a RecordingRunner whose kmod fake changes the fixture tree, so every test
sees both the exact commands a node would run and their effect on /sys/module.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from erdma.host.devices import scan
from erdma.host.driver import (
    DriverError,
    DriverInUse,
    DriverMissing,
    DriverMode,
    choose_mode,
    loaded_driver,
    switch_mode,
)
from erdma.host.installer import CommandInstaller
from erdma.host.run import RecordingRunner, Result
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands


def make(tmp_path: Path, variant: str | fakehost.HostSpec = "default", **kmod):
    host = fakehost.build(tmp_path / "host", variant)
    cmds = KmodCommands(host, **kmod)
    return host, cmds, RecordingRunner(handlers=[cmds])


def compat_param(host: fakehost.FakeHost) -> str:
    return (host.sys / "module/erdma/parameters/compat_mode").read_text().strip()


# -- modes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["default", "compat", "ofed", " OFED ", "Compat"])
def test_every_documented_mode_name_parses(text):
    assert DriverMode.parse(text).value == text.strip().lower()


@pytest.mark.parametrize("text", ["mlnx", "", "rdma", "auto"])
def test_unknown_mode_names_the_key_the_value_and_the_valid_modes(text):
    with pytest.raises(ValueError) as err:
        DriverMode.parse(text)
    message = str(err.value)
    assert f"preferDriver={text!r}" in message
    assert "default, compat, ofed" in message


def test_modes_load_the_documented_parameters_and_helpers():
    table = {m: (m.compat_mode, m.wants_smc, m.wants_peermem) for m in DriverMode}
    assert table == {
        DriverMode.DEFAULT: (False, True, False),
        DriverMode.COMPAT: (True, True, True),
        DriverMode.OFED: (True, False, True),
    }


# -- what is loaded ---------------------------------------------------------------------------
def test_loaded_mode_is_read_from_the_compat_mode_parameter(tmp_path):
    default = fakehost.build(tmp_path / "d", "default")
    compat = fakehost.build(tmp_path / "c", "compat")
    assert loaded_driver(default.root).compat_mode is False
    assert loaded_driver(compat.root).compat_mode is True


def test_driver_not_loaded_and_upstream_driver_have_no_compat_mode(tmp_path):
    absent = loaded_driver(fakehost.build(tmp_path / "a", "driver-not-loaded").root)
    assert (absent.loaded, absent.compat_mode, absent.upstream) == (False, None, False)
    upstream_spec = replace(fakehost.erdma_node(), compat_mode=None)
    upstream = loaded_driver(fakehost.build(tmp_path / "u", upstream_spec).root)
    assert (upstream.loaded, upstream.compat_mode, upstream.upstream) == (True, None, True)


# -- choosing ---------------------------------------------------------------------------------
def test_gpu_node_chooses_ofed_automatically(tmp_path):
    gpus = scan(fakehost.build(tmp_path / "g", "gpu").root).gpus
    mode, reason = choose_mode(None, gpus)
    assert mode is DriverMode.OFED
    assert "8 NVIDIA GPU" in reason


def test_node_without_gpus_chooses_default_automatically(tmp_path):
    gpus = scan(fakehost.build(tmp_path / "d", "default").root).gpus
    assert choose_mode("", gpus) == (DriverMode.DEFAULT, "automatic: no NVIDIA GPU found")


def test_explicit_prefer_driver_wins_over_gpus(tmp_path):
    gpus = scan(fakehost.build(tmp_path / "g", "gpu").root).gpus
    assert choose_mode("compat", gpus) == (DriverMode.COMPAT, "preferDriver=compat")
    with pytest.raises(ValueError, match="preferDriver='roce'"):
        choose_mode("roce", gpus)


# -- switching --------------------------------------------------------------------------------
async def test_default_to_compat_reloads_with_compat_mode_y(tmp_path):
    host, _, runner = make(tmp_path, "default")
    done = await switch_mode(runner, DriverMode.COMPAT, host.root)
    assert runner.calls == [
        ("rmmod", "erdma"),
        ("modprobe", "erdma", "compat_mode=Y"),
        ("modinfo", "nvidia_peermem"),
    ]
    assert compat_param(host) == "Y"
    assert done.driver.compat_mode is True
    assert "smc already loaded" in done.notes
    assert any(n.startswith("nvidia_peermem not available") for n in done.notes)


async def test_compat_to_default_reloads_with_compat_mode_n(tmp_path):
    host, _, runner = make(tmp_path, "compat")
    done = await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert runner.calls == [("rmmod", "erdma"), ("modprobe", "erdma", "compat_mode=N")]
    assert compat_param(host) == "N"
    assert done.actions == ("unloaded erdma (was compat_mode=Y)", "loaded erdma with compat_mode=N")


async def test_same_mode_runs_no_rmmod_and_no_erdma_command(tmp_path):
    host, _, runner = make(tmp_path, "default")
    done = await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert runner.calls == []
    assert done.actions == ("erdma already loaded with compat_mode=N",)


async def test_ofed_on_a_gpu_node_loads_peermem_and_not_smc(tmp_path):
    spec = replace(fakehost.variant("gpu"), smc_loaded=False)
    host, _, runner = make(tmp_path, spec, installed={"erdma", "smc", "nvidia_peermem"})
    done = await switch_mode(runner, DriverMode.OFED, host.root)
    assert runner.calls == [("modinfo", "nvidia_peermem"), ("modprobe", "nvidia_peermem")]
    assert host.module_loaded("nvidia_peermem") and not host.module_loaded("smc")
    assert done.notes == ("loaded nvidia_peermem",)


async def test_driver_not_loaded_is_checked_then_loaded(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded")
    done = await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert runner.calls == [("modinfo", "erdma"), ("modprobe", "erdma", "compat_mode=N")]
    assert (done.driver.loaded, done.driver.compat_mode) == (True, False)


async def test_commands_run_in_the_host_mount_namespace_when_containerised(tmp_path):
    host = fakehost.build(tmp_path / "host", "default")
    runner = RecordingRunner(handlers=[KmodCommands(host)], host_namespace=True)
    await switch_mode(runner, DriverMode.COMPAT, host.root)
    nsenter = ("nsenter", "-t", "1", "-m", "--")
    assert runner.calls == [
        (*nsenter, "rmmod", "erdma"),
        (*nsenter, "modprobe", "erdma", "compat_mode=Y"),
        (*nsenter, "modinfo", "nvidia_peermem"),
    ]
    assert compat_param(host) == "Y"


async def test_module_in_use_names_users_and_both_remedies(tmp_path):
    host, _, runner = make(tmp_path, "default")
    host.set_refcount("erdma", 3)
    with pytest.raises(DriverInUse) as err:
        await switch_mode(runner, DriverMode.OFED, host.root)
    assert err.value.problem == "erdma is in use by 3 users (rmmod: ERROR: Module erdma is in use)"
    assert "drain the node" in err.value.remedy
    assert err.value.remedy.endswith("set preferDriver to the loaded mode default")
    assert runner.calls == [("rmmod", "erdma")]
    assert compat_param(host) == "N"  # left as it was


async def test_loaded_compat_in_use_suggests_compat(tmp_path):
    host, _, runner = make(tmp_path, "compat")
    host.set_refcount("erdma", 1)
    with pytest.raises(DriverInUse, match="by 1 users") as err:
        await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert err.value.remedy.endswith("the loaded mode compat")


async def test_missing_module_says_so_and_how_to_install(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded", installed={"smc"})
    with pytest.raises(DriverMissing) as err:
        await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert "modinfo: ERROR: Module erdma not found." in err.value.problem
    assert "driverInstallCommand" in err.value.remedy
    assert runner.calls == [("modinfo", "erdma")]


async def test_install_command_runs_only_when_missing_then_the_driver_loads(tmp_path):
    host, cmds, runner = make(tmp_path, "driver-not-loaded", installed={"smc"})
    command = "curl -fsS http://mirror/erdma_installer.sh | sh"

    def installer(argv: tuple[str, ...]) -> Result | None:
        if argv[:2] != ("sh", "-c"):
            return None
        cmds.installed.add("erdma")
        return Result(argv, 0)

    runner.handlers.insert(0, installer)
    done = await switch_mode(runner, DriverMode.COMPAT, host.root, CommandInstaller(command, 60))
    assert runner.calls == [
        ("modinfo", "erdma"),
        ("sh", "-c", command),
        ("modinfo", "erdma"),
        ("modprobe", "erdma", "compat_mode=Y"),
        ("modinfo", "nvidia_peermem"),
    ]
    assert done.actions[0] == "installed erdma: ran driverInstallCommand in 0s"
    assert compat_param(host) == "Y"


async def test_failing_install_command_is_reported_with_its_output(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded", installed=set())
    runner.handlers.insert(0, lambda a: Result(a, 2, "", "no network\n") if a[0] == "sh" else None)
    with pytest.raises(DriverMissing) as err:
        await switch_mode(runner, DriverMode.DEFAULT, host.root, CommandInstaller("install-it", 60))
    assert "driverInstallCommand failed" in err.value.problem
    assert "exited 2: no network" in err.value.problem


async def test_missing_kmod_tools_ask_for_kmod(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded")
    runner.handlers.insert(0, lambda a: Result(a, 127, "", "modinfo: command not found"))
    with pytest.raises(DriverError) as err:
        await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert "install kmod" in err.value.remedy


async def test_modprobe_failure_points_at_the_kernel_log(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded")
    runner.handlers.insert(
        0,
        lambda a: (
            Result(a, 1, "", "modprobe: ERROR: could not insert 'erdma': Exec format error\n")
            if a[:2] == ("modprobe", "erdma")
            else None
        ),
    )
    with pytest.raises(DriverError) as err:
        await switch_mode(runner, DriverMode.DEFAULT, host.root)
    assert "Exec format error" in err.value.problem
    assert "dmesg" in err.value.remedy


async def test_loaded_upstream_driver_is_left_alone_with_a_note(tmp_path):
    spec = replace(fakehost.erdma_node(), compat_mode=None)
    host, _, runner = make(tmp_path, spec)
    done = await switch_mode(runner, DriverMode.COMPAT, host.root)
    assert runner.calls == [("modinfo", "nvidia_peermem")]
    assert done.driver.upstream
    assert "no compat_mode parameter" in done.notes[0]


async def test_upstream_driver_ignores_compat_mode_when_loaded(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded", upstream=True)
    done = await switch_mode(runner, DriverMode.COMPAT, host.root)
    assert runner.calls[:2] == [("modinfo", "erdma"), ("modprobe", "erdma", "compat_mode=Y")]
    assert done.driver.upstream
    assert any("cannot change it" in n for n in done.notes)
