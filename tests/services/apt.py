"""Debian packages a test service needs, installed with apt-get when its programs are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

APT_TIMEOUT_SECONDS = 300.0


class PackagesUnavailableError(RuntimeError):
    """The programs are missing and apt-get could not (or may not) install their packages."""


def install_missing(programs: Sequence[str], packages: Sequence[str]) -> None:
    """Install `packages` unless every one of `programs` is on PATH already (root only)."""
    if all(shutil.which(name) for name in programs):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PackagesUnavailableError(
            f"{' '.join(packages)} not installed and apt-get cannot run here"
        )
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=120"]
    install = [*apt, "install", "-y", "--no-install-recommends", *packages]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        # A fresh machine may have no package lists yet: refresh them once if install fails.
        for command in (install, [*apt, "update"], install):
            done = subprocess.run(
                command, check=False, capture_output=True, timeout=APT_TIMEOUT_SECONDS, env=env
            )
            if done.returncode == 0 and command is install:
                return
    except (subprocess.SubprocessError, OSError) as exc:
        raise PackagesUnavailableError(f"could not install {' '.join(packages)}: {exc}") from exc
    raise PackagesUnavailableError(f"apt-get could not install {' '.join(packages)}")
