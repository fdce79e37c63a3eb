"""gRPC's C-core INFO lines stay off the programs' stderr unless a person asks for them."""

from __future__ import annotations

import os
import subprocess
import sys

SHOW = "import erdma, os; print(os.environ['GRPC_VERBOSITY'], os.environ['GLOG_minloglevel'])"


def run(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("GRPC_VERBOSITY", "GLOG_minloglevel")}
    result = subprocess.run(
        [sys.executable, "-c", SHOW],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_grpc_core_logs_errors_only_by_default():
    assert run({}) == "ERROR 2"


def test_a_person_who_sets_grpc_verbosity_keeps_it():
    assert run({"GRPC_VERBOSITY": "DEBUG", "GLOG_minloglevel": "0"}) == "DEBUG 0"
