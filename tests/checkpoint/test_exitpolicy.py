"""The exit policy's cost and rules, on one process (COMM_SELF: a real communicator, a real signal)."""

from __future__ import annotations

import os
import signal
import time

from mpi4py import MPI

from ftkit.checkpoint.exitpolicy import MAX_GAP, ExitPolicy
from ftkit.config import Config


class Clock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 1e9, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def _policy(tmp_path, clock, **keys) -> ExitPolicy:
    cfg = Config(meta_dir=tmp_path / "meta", ckpt_dir=tmp_path / "l", glbl_dir=tmp_path / "g", **keys)
    return ExitPolicy(MPI.COMM_SELF, cfg, "run", clock=clock)


def test_short_steps_share_one_agreement_among_many_calls(tmp_path):
    policy = _policy(tmp_path, Clock(1e-4))
    try:
        calls = 5000
        assert not any(policy.poll() for _ in range(calls))
        assert policy.checks <= calls // MAX_GAP + 3  # not one collective per step
    finally:
        policy.close()


def test_long_steps_are_checked_every_call(tmp_path):
    policy = _policy(tmp_path, Clock(5.0))
    try:
        assert not any(policy.poll() for _ in range(20))
        assert policy.checks == 20
    finally:
        policy.close()


def test_the_end_of_the_allocation_within_the_margin_says_exit(tmp_path):
    policy = _policy(tmp_path, time.time, end_time=f"{time.time() + 3000:.0f}", exit_margin=3600.0)
    try:
        assert not policy.poll()  # the first agreement is in flight
        assert policy.poll() and "the allocation ends in" in policy.reasons[0]
    finally:
        policy.close()


def test_a_signal_is_seen_and_the_previous_handler_still_runs_and_comes_back(tmp_path):
    seen = []

    def previous(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGUSR1, previous)
    try:
        policy = _policy(tmp_path, Clock(5.0))
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
        assert not policy.poll()
        assert policy.poll() and policy.reasons == ["signal SIGUSR1"]
        policy.close()
        assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_the_policy_of_a_promoted_spare_never_says_exit():
    off = ExitPolicy.off()
    assert not off.poll() and not off.decided and off.checks == 0
    assert off.finish_snapshot(None, 0) == 0  # type: ignore[arg-type]
    off.checkpointed(1.0)
    off.close()
