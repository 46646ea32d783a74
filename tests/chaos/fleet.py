"""A fleet of real `batchcrop worker` processes the chaos harness kills, pauses and restarts.

Every process is started by us, tracked by its Popen and signalled by its pid only. A slot whose
process died (by our SIGKILL or otherwise) is restarted by `supervise()`; exits we did not cause
are recorded with their exit codes, and every log is kept for the post-mortem.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

STOP_TIMEOUT_SECONDS = 30.0


@dataclass
class Slot:
    """One worker position: its current process and the generations it went through."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    generation: int = 0
    paused_until: float | None = None  # time.monotonic() at which to SIGCONT
    killed_by_us: bool = False
    log: Path | None = None


@dataclass
class Fleet:
    """`size` workers running `args` with `env`, logs in `log_dir`."""

    size: int
    args: list[str]
    env: dict[str, str]
    log_dir: Path
    rng: random.Random
    slots: list[Slot] = field(default_factory=list)
    unexpected_exits: list[tuple[int, int, str]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    kills: list[tuple[int, datetime]] = field(default_factory=list)
    """(pid, wall-clock UTC time) of every SIGKILL we sent."""

    def start(self) -> None:
        """Start every worker."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.slots = [Slot(n) for n in range(self.size)]
        for slot in self.slots:
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        slot.generation += 1
        log = self.log_dir / f"worker-{slot.index}-{slot.generation}.log"
        self.logs.append(log)
        slot.log = log
        with log.open("wb") as handle:
            slot.process = subprocess.Popen(
                [sys.executable, "-m", "batchcrop", "--log-level", "INFO", "worker", *self.args],
                env=self.env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the harness is ours to forward, not theirs
            )
        slot.killed_by_us = False
        slot.paused_until = None

    def running(self) -> list[Slot]:
        """Slots whose process is alive and not paused."""
        return [
            s
            for s in self.slots
            if s.process is not None and s.process.poll() is None and s.paused_until is None
        ]

    def kill_random(self) -> int | None:
        """SIGKILL one running, unpaused worker; returns its pid (None if none runs)."""
        candidates = self.running()
        if not candidates:
            return None
        slot = self.rng.choice(candidates)
        assert slot.process is not None
        slot.killed_by_us = True
        os.kill(slot.process.pid, signal.SIGKILL)
        self.kills.append((slot.process.pid, datetime.now(UTC)))
        slot.process.wait(STOP_TIMEOUT_SECONDS)
        return slot.process.pid

    def pause_random(self, seconds: float) -> int | None:
        """SIGSTOP one running worker for `seconds` (resumed by `supervise`); returns its pid."""
        candidates = self.running()
        if len(candidates) < 2:
            return None  # keep someone working (and reaping) while one is frozen
        slot = self.rng.choice(candidates)
        assert slot.process is not None
        os.kill(slot.process.pid, signal.SIGSTOP)
        slot.paused_until = time.monotonic() + seconds
        return slot.process.pid

    def supervise(self) -> int:
        """Resume due pauses and restart dead workers; returns how many were restarted."""
        restarted = 0
        now = time.monotonic()
        for slot in self.slots:
            proc = slot.process
            if proc is None:
                continue
            if slot.paused_until is not None and now >= slot.paused_until:
                os.kill(proc.pid, signal.SIGCONT)
                slot.paused_until = None
            code = proc.poll()
            if code is None:
                continue
            if not slot.killed_by_us:
                self.unexpected_exits.append((proc.pid, code, slot.log.name if slot.log else ""))
            self._spawn(slot)
            restarted += 1
        return restarted

    def stop(self) -> list[int]:
        """Resume, SIGTERM and wait for every worker (SIGKILL after a timeout); exit codes."""
        codes = []
        for slot in self.slots:
            proc = slot.process
            if proc is None or proc.poll() is not None:
                continue
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        for slot in self.slots:
            proc = slot.process
            if proc is None:
                continue
            try:
                codes.append(proc.wait(STOP_TIMEOUT_SECONDS))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait(STOP_TIMEOUT_SECONDS))
        return codes

    def tracebacks(self) -> list[str]:
        """Log files of every generation that contain a Python traceback."""
        return [p.name for p in self.logs if p.exists() and b"Traceback" in p.read_bytes()]
