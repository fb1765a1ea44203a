"""L3 encoded groups (RS and XOR): streamed encode equals whole-file encode; rebuild after losses restores
every data and parity file bit for bit; losses beyond the code raise RecoveryError on every member."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAM = Path(__file__).parents[1] / "programs" / "levels_encoded.py"


def _run(tmp_path: Path, nprocs: int, code: str, scenarios: list[str]) -> dict[str, list[str]]:
    res = run_python(nprocs, PROGRAM, str(tmp_path), code, ",".join(scenarios)).check()
    out: dict[str, list[str]] = {s: [] for s in scenarios}
    for line in res.stdout.splitlines():
        m = re.match(r"(OK|RECOVERYERROR) (\S+) (\d+)", line)
        if m:
            out[m.group(2)].append(line)
    for s, lines in out.items():
        assert len(lines) == nprocs, f"{s}: expected one line per rank\n{res.stdout}\n{res.stderr}"
    return out


def test_rs_group_of_four(tmp_path):
    recoverable = ["none", "node1", "node2", "node12", "node03", "data2", "parity3", "allparity", "twice",
                   "node12~off", "parity3~off", "twice~off", "alldata"]  # alldata: the 4 parity files suffice
    out = _run(tmp_path, 4, "rs", recoverable + ["node123", "node123~off"])
    for s in recoverable:
        assert all(line.startswith("OK ") for line in out[s]), out[s]
    assert "lost=[(1, 2, 5, 6)]" in out["node12"][0]
    for s in ("node123", "node123~off"):
        assert all(line.startswith("RECOVERYERROR ") for line in out[s]), out[s]
        assert all("RS(4,4) needs 4 of 8 files, 2 survive" in line for line in out[s])
    assert all("rank 3 on node 3 (data+parity)" in line for line in out["node123"])


def test_rs_encoded_from_memory(tmp_path):
    """Encoding from the bytes in memory (each chunk sent and encoded where it lies, a chunk across two
    pieces copied) writes the same parity as from the file (checked against a whole-file encoding), and
    the group rebuilds from it; members that disagree on having memory fall back to the file path."""
    recoverable = ["none~mem", "node12~mem", "node03~mem", "none~mixed", "node1~mixed"]
    out = _run(tmp_path, 4, "rs", recoverable)
    for s in recoverable:
        assert all(line.startswith("OK ") for line in out[s]), out[s]
    assert "lost=[(1, 2, 5, 6)]" in out["node12~mem"][0]


def test_rs_uneven_group_of_five(tmp_path):
    out = _run(tmp_path, 5, "rs", ["node4", "node013", "node0123"])
    assert all(line.startswith("OK ") for s in ("node4",) for line in out[s])
    # 5 data + 5 parity: losing 3 nodes leaves 4 < 5 files.
    assert all(line.startswith("RECOVERYERROR ") for line in out["node013"])
    assert all(line.startswith("RECOVERYERROR ") for line in out["node0123"])


@pytest.mark.parametrize("nprocs", [3, 4])
def test_xor_group(tmp_path, nprocs):
    recoverable = ["none", "node0", "node1", "node2", "data2", "parity1", "allparity"]
    if nprocs == 4:  # "twice" loses node 3 in its second round
        recoverable.append("twice")
    if nprocs == 4:
        recoverable += ["node1~off", "parity3~off", "twice~off"]
    out = _run(tmp_path, nprocs, "xor", recoverable + ["node12", "alldata", "node12~off"])
    for s in recoverable:
        assert all(line.startswith("OK ") for line in out[s]), out[s]
    for s in ("node12", "alldata", "node12~off"):
        assert all(line.startswith("RECOVERYERROR ") for line in out[s]), out[s]
        assert all("XOR survives the loss of one member only" in line for line in out[s])


@pytest.mark.parametrize("code", ["rs", "xor"])
def test_encode_and_rebuild_memory_stays_bounded(tmp_path, code):
    # 96 MiB files, default 48 MiB buffer bound: the peak RSS may grow by the buffers, not by the file size.
    res = run_python(4, PROGRAM.with_name("levels_memory.py"), str(tmp_path), "96", code, timeout=300).check()
    peaks = [float(x) for x in re.findall(r"PEAK \d+ ([0-9.]+)", res.stdout)]
    assert len(peaks) == 4, res.stdout + res.stderr
    assert max(peaks) <= 64.0, peaks


@pytest.mark.parametrize("code, nprocs", [("rs", 4), ("xor", 3)])
def test_forged_parity_header_is_a_lost_parity_file_on_every_member(tmp_path, code, nprocs):
    # A parity header that is valid JSON of the wrong type ([] instead of an object): before the fix one
    # member raised AttributeError in assess_group and the others hung in its allgather.
    out = _run(tmp_path, nprocs, code, ["forged1", "forged1~off"])
    for s in ("forged1", "forged1~off"):
        assert all(line.startswith("OK ") and f"lost=[({nprocs + 1},)]" in line for line in out[s]), out[s]


STUCK_CASES = ["rs-encode", "xor-encode", "assess", "rs-rebuild", "xor-rebuild"]


def test_a_stuck_member_makes_every_member_time_out_in_encode_assess_and_rebuild(tmp_path):
    # Member 2 is alive but stuck (a real SIGSTOP: inside the encoding, or just before an assessment or a
    # rebuild). Before the L3 collectives had deadlines the three others waited forever. Now each of them
    # raises TimeoutFailure after the 0.5 s deadline, and member 2, once resumed, too; nothing is committed.
    res = run_python(4, PROGRAM.with_name("levels_encoded_stuck.py"), str(tmp_path), "0.5", "2",
                     ",".join(STUCK_CASES), timeout=300).check()  # fmt: skip
    for case in STUCK_CASES:
        lines = re.findall(rf"^(\w+) {case} (\d) (.*)$", res.stdout, re.M)
        assert sorted(int(r) for _, r, _ in lines) == [0, 1, 2, 3], f"{case}:\n{res.stdout}\n{res.stderr}"
        assert all(kind == "TIMEOUT" and "L3" in rest for kind, _, rest in lines), f"{case}: {lines}"
    files = dict(re.findall(r"^FILES (\S+) ?(.*)$", res.stdout, re.M))
    datas = [f"node{m}/data" for m in range(4)]
    parities = [f"node{m}/parity" for m in range(4)]
    for case in ("rs-encode", "xor-encode"):  # no parity file, not even a temporary one
        assert sorted(files[case].split()) == datas, files[case]
    assert sorted(files["assess"].split()) == sorted(datas + parities), files["assess"]
    for case in ("rs-rebuild", "xor-rebuild"):  # member 1's data file was not (half) rebuilt
        assert sorted(files[case].split()) == sorted(d for d in datas + parities if d != "node1/data"), files
    assert sorted(re.findall(r"^SANE (\d) True$", res.stdout, re.M)) == ["0", "1", "2", "3"], res.stdout
