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


def test_the_placeholder_policy_of_a_session_being_opened_never_says_exit():
    off = ExitPolicy.off()
    assert not off.poll() and not off.decided and off.checks == 0
    assert off.finish_snapshot(None, 0) == 0  # type: ignore[arg-type]
    off.checkpointed(1.0)
    off.close()


def test_rebind_abandons_the_agreement_in_flight_and_counts_afresh(tmp_path):
    # What an online recovery does: the agreement started on the old communicator is dropped (never waited
    # for), the checks restart at the first call on the new one, and the agreed signal is not lost.
    policy = _policy(tmp_path, Clock(5.0))
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert not policy.poll()           # an agreement in flight
        old_comm = policy._comm            # noqa: SLF001 - what rebind must drop
        policy.rebind(MPI.COMM_SELF, "run2", policy.config)
        assert policy._comm is not old_comm and policy._req is None  # noqa: SLF001
        assert policy.exec_id == "run2" and not policy.decided and policy.checks == 0
        assert not policy.poll()           # the first check on the new communicator starts one
        assert policy.poll() and policy.reasons == ["signal SIGUSR2"]
        policy.rebind(MPI.COMM_SELF, "run3", policy.config)  # a decision not acted on is taken again
        assert not policy.decided and not policy.poll() and policy.poll()
    finally:
        policy.close()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL


def test_an_idle_spare_holds_the_exit_signals_and_brings_them_when_promoted(tmp_path):
    cfg = Config(meta_dir=tmp_path / "meta", ckpt_dir=tmp_path / "l", glbl_dir=tmp_path / "g")
    held = ExitPolicy.idle(cfg)
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # as scancel -s TERM: held, the process goes on
        assert not held.poll() and held.checks == 0  # no agreement while idle
        held.rebind(MPI.COMM_SELF, "run", cfg)
        assert not held.poll()
        assert held.poll() and held.reasons == ["signal SIGTERM"]
    finally:
        held.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
