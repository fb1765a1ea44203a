"""File fuzzer (issue 13): every reader of every on-disk format ends in correct data or a specific ftkit
error.

For the checkpoint file, the manifest, the parity file, the state table and the input store, hypothesis
mutates bytes, truncates, forges headers that still pass the checksum (re-signed), swaps files between ranks,
checkpoints and runs, and plants symbolic links. A case passes when the reader returns exactly the data
written -- or, for a forged file that is consistent in itself and has no outside anchor (manifest, state
table), some well-formed value -- or raises an :class:`~ftkit.errors.FtkitError` subclass; any other
exception (TypeError, ValueError, RecursionError, AttributeError...) fails the test. Where an outside anchor
exists (the manifest's header digest for checkpoint files, the parity headers' data digests for L3, the key
for the input store), a forged or swapped file must be refused or repaired to the exact bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftkit.errors import FormatError, FtkitError
from ftkit.failure.state import load_state_table
from ftkit.storage.format import container as fmt
from ftkit.storage.groupcode.offline import assess_group_files, rebuild_group_files
from ftkit.storage.groupcode.parity import MAGIC as PARITY_MAGIC
from ftkit.storage.groupcode.parity import payload_offset_for, verify_parity
from ftkit.storage.inputs import CheckpointFileStore
from ftkit.storage.manifest import Manifest

from .test_golden import GOLDEN, gen

#: Examples per property (FTKIT_FUZZ_EXAMPLES=2000 for a longer hunt by hand).
FUZZ = settings(max_examples=int(os.environ.get("FTKIT_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=list(HealthCheck), database=None)

#: Values a hostile header may hold: wrong types, NumPy dtype strings that are not plain numbers, huge and
#: non-finite numbers, path tricks, deep nesting.
HOSTILE = st.one_of(
    st.sampled_from(["<f3", "|V8", "O", "<U4", "<c4", ">M8", "<f8", "|b1", "", "..", "/etc", "nan", "inf",
                     10**30, -1, 2**63, 2**64, 0, 1.5, float("nan"), float("inf"), True, None, [], {},
                     [[[[[]]]]], {"a": {"b": {"c": []}}}, "0" * 16, "x" * 300]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                 max_leaves=8),
)
DEEP = st.sampled_from(["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000, "9" * 5000,
                        "-" + "9" * 5000 + "e99999", "1e999", "NaN"])


def _outcome(read: Any) -> Any:
    """Run ``read()``; return its value, or the FtkitError it raised. Anything else fails the test."""
    try:
        return read()
    except FtkitError as exc:
        return exc


def _mutations() -> st.SearchStrategy:
    flips = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1,
                     max_size=6)
    return st.one_of(st.tuples(st.just("flip"), flips), st.tuples(st.just("truncate"), st.floats(0, 1)),
                     st.tuples(st.just("append"), st.binary(min_size=1, max_size=64)))


def _mutate(blob: bytes, how: tuple[str, Any]) -> bytes:
    kind, arg = how
    b = bytearray(blob)
    if kind == "flip":
        for pos, x in arg:
            b[int(pos * len(b))] ^= x
    elif kind == "truncate":
        del b[int(arg * len(b)):]
    else:
        b += arg
    return bytes(b)


def _set_path(doc: Any, path: list[Any], value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


# ------------------------------------------------------------------------------------------ checkpoint file

ARRAYS = [("u", np.linspace(-1, 1, 40).reshape(5, 8)), ("step", np.array([7], np.int64)),
          ("mask", np.array([True, False]))]


def _ckpt(d: Path, rank: int = 0, ckpt_id: int = 1, exec_id: str = "run1") -> tuple[Path, str]:
    arrays = [(n, a + rank if a.dtype.kind == "f" else a) for n, a in ARRAYS]
    info = fmt.write_file(d / f"c{ckpt_id}r{rank}{exec_id}.ftk", arrays, rank=rank, level=1, ckpt_id=ckpt_id,
                          exec_id=exec_id, nranks=2, fsync=False)
    return d / f"c{ckpt_id}r{rank}{exec_id}.ftk", info.digest


def _read_ckpt(path: Path, digest: str) -> Any:
    """What recovery does: verify against the manifest's digest, then read into arrays of the known shape."""
    def read() -> dict[str, np.ndarray]:
        fmt.verify_file(path, expect_digest=digest)
        out = {n: np.zeros_like(a) for n, a in ARRAYS}
        fmt.read_into(path, out)
        return out

    return _outcome(read)


def _check_ckpt(got: Any) -> None:
    if isinstance(got, FtkitError):
        return
    for n, a in ARRAYS:
        assert got[n].tobytes() == a.tobytes(), n


def _resign(raw: bytes, pad_to: int | None) -> bytes:
    if pad_to is not None and len(raw) < pad_to:
        raw = raw + b" " * (pad_to - len(raw))
    return fmt.PREAMBLE.pack(fmt.MAGIC, fmt.VERSION, 0, 0, len(raw), xxhash.xxh3_64_intdigest(raw)) + raw


@FUZZ
@given(how=_mutations())
def test_checkpoint_file_damage(how):
    with tempfile.TemporaryDirectory() as d:
        path, digest = _ckpt(Path(d))
        path.write_bytes(_mutate(path.read_bytes(), how))
        _check_ckpt(_read_ckpt(path, digest))
        _outcome(lambda: fmt.read_arrays(path))  # without the manifest: an ftkit error or some arrays


@FUZZ
@given(where=st.sampled_from([["rank"], ["nranks"], ["data_offset"], ["file_size"], ["meta"], ["exec_id"],
                              ["sections"], ["sections", 0], ["sections", 0, "dtype"],
                              ["sections", 0, "shape"], ["sections", 1, "dtype"], ["sections", 0, "offset"],
                              ["sections", 0, "nbytes"], ["sections", 2, "xxh3"], ["format"]]),
       value=HOSTILE, deep=st.none() | DEEP)
def test_checkpoint_header_forged_and_resigned(where, value, deep):
    with tempfile.TemporaryDirectory() as d:
        path, digest = _ckpt(Path(d))
        blob = path.read_bytes()
        hlen = fmt.PREAMBLE.unpack(blob[:fmt.PREAMBLE.size])[4]
        doc = json.loads(blob[fmt.PREAMBLE.size:fmt.PREAMBLE.size + hlen])
        _set_path(doc, where, value)
        raw = deep.encode() if deep is not None else json.dumps(doc).encode()
        path.write_bytes(_resign(raw, hlen) + blob[fmt.PREAMBLE.size + hlen:])
        _check_ckpt(_read_ckpt(path, digest))
        _outcome(lambda: fmt.read_arrays(path))
        _outcome(lambda: fmt.verify_file(path))


@FUZZ
@given(swap=st.sampled_from(["rank", "ckpt", "run", "symlink"]))
def test_checkpoint_file_swapped_or_linked(swap):
    with tempfile.TemporaryDirectory() as d:
        path, digest = _ckpt(Path(d))
        other, _ = _ckpt(Path(d), **{"rank": {"rank": 1}, "ckpt": {"ckpt_id": 2}, "run": {"exec_id": "run2"},
                                     "symlink": {"rank": 1}}[swap])
        path.unlink()
        if swap == "symlink":
            path.symlink_to(other)
        else:
            os.replace(other, path)
        got = _read_ckpt(path, digest)
        assert isinstance(got, FtkitError), "a file of another rank/checkpoint/run was accepted"


# ------------------------------------------------------------------------------------------------ manifest

MANIFEST_TEXT = (GOLDEN / "golden_manifest_v1.json").read_text()


def _load_manifest(text: str) -> Any:
    got = _outcome(lambda: Manifest.loads(text, "fuzzed manifest"))
    assert isinstance(got, (Manifest, FormatError)), got
    return got


@FUZZ
@given(how=_mutations())
def test_manifest_damage(how):
    got = _load_manifest(_mutate(MANIFEST_TEXT.encode(), how).decode(errors="replace"))
    if isinstance(got, Manifest):  # a manifest is its own root of trust: it must at least be well-formed
        assert got.nranks >= 1 and len({e.id for e in got.checkpoints}) == len(got.checkpoints)


@FUZZ
@given(where=st.sampled_from([["exec_id"], ["nranks"], ["created"], ["dirs"], ["dirs", "ckpt_dir"],
                              ["checkpoints"], ["checkpoints", 0, "id"], ["checkpoints", 0, "time"],
                              ["checkpoints", 0, "levels"], ["checkpoints", 1, "files"],
                              ["checkpoints", 1, "nodes", 0], ["checkpoints", 0, "extra"], ["status"]]),
       value=HOSTILE, deep=st.none() | DEEP)
def test_manifest_forged(where, value, deep):
    doc = json.loads(MANIFEST_TEXT)
    _set_path(doc, where, value)
    _load_manifest(deep if deep is not None else json.dumps(doc))


@pytest.mark.parametrize("change, message", [
    (lambda d: d["checkpoints"][1].update(id=1), "more than once"),
    (lambda d: d["checkpoints"][0].update(time="nan"), "finite"),
    (lambda d: d["checkpoints"][0].update(time=float("nan")), "finite"),
    (lambda d: d.update(nranks=0), "nranks"),
    (lambda d: d.update(exec_id=".."), "plain name"),
    (lambda d: d.update(exec_id="/home/user/project"), "plain name"),
    (lambda d: d["dirs"].update(ckpt_dir="relative/dir"), "absolute"),
    (lambda d: d["dirs"].update(home="/home/user"), "unknown key"),
])
def test_manifest_forgeries_of_issue_13_are_refused(change, message):
    doc = json.loads(MANIFEST_TEXT)
    change(doc)
    with pytest.raises(FormatError, match=message):
        Manifest.loads(json.dumps(doc), "forged manifest")


# -------------------------------------------------------------------------------------------- parity files

def _group(d: Path, code: str) -> tuple[list[Path], list[Path]]:
    shutil.copytree(GOLDEN / f"parity_{code}", d / "g")
    return gen.group_paths(d / "g")


def _repair(code: str, data: list[Path], parity: list[Path]) -> None:
    """What ``ftkit rebuild`` does: assess, rebuild; the result is exact bytes or an ftkit error."""
    plan = assess_group_files(data, parity, code=code, tag=gen.GROUP_TAG)
    got = _outcome(lambda: rebuild_group_files(plan, data, parity, tag=gen.GROUP_TAG))
    if not isinstance(got, FtkitError):
        for p in data:
            assert p.read_bytes() == (GOLDEN / f"parity_{code}" / p.name).read_bytes(), p.name
        for p in parity:  # the same header (its JSON may be spelt differently) and the same parity bytes
            golden = GOLDEN / f"parity_{code}" / p.name
            h = verify_parity(p)
            assert h == verify_parity(golden), p.name
            assert p.read_bytes()[h.payload_offset:] == golden.read_bytes()[h.payload_offset:], p.name


@FUZZ
@given(code=st.sampled_from(["rs", "xor"]), member=st.integers(0, 2), how=_mutations())
def test_parity_file_damage(code, member, how):
    with tempfile.TemporaryDirectory() as d:
        data, parity = _group(Path(d), code)
        parity[member].write_bytes(_mutate(parity[member].read_bytes(), how))
        data[(member + 1) % 3].unlink()
        _repair(code, data, parity)


@FUZZ
@given(code=st.sampled_from(["rs", "xor"]), member=st.integers(0, 2), value=HOSTILE, deep=st.none() | DEEP,
       where=st.sampled_from(["code", "k", "index", "sizes", "digests", "payload_offset", "payload_length",
                              "payload_digest", "tag", "format", None]))
def test_parity_header_forged(code, member, value, deep, where):
    with tempfile.TemporaryDirectory() as d:
        data, parity = _group(Path(d), code)
        blob = parity[member].read_bytes()
        (hlen,) = struct.unpack("<I", blob[8:12])
        doc = json.loads(blob[12:12 + hlen])
        if where is None:
            doc = value  # valid JSON of the wrong type
        else:
            doc[where] = value
        raw = deep.encode() if deep is not None else json.dumps(doc).encode()
        payload_offset = payload_offset_for(3)
        head = PARITY_MAGIC + struct.pack("<I", len(raw)) + raw
        parity[member].write_bytes(head.ljust(payload_offset, b"\0") + blob[payload_offset:]
                                   if len(head) <= payload_offset else head + blob[payload_offset:])
        data[(member + 1) % 3].unlink()
        _repair(code, data, parity)


@pytest.mark.parametrize("swap", ["members", "codes", "runs", "symlink"])
def test_parity_files_swapped_or_linked(tmp_path, swap):
    data, parity = _group(tmp_path, "rs")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    if swap == "members":
        tmp = parity[0].with_name("t")
        os.replace(parity[0], tmp)
        os.replace(parity[1], parity[0])
        os.replace(tmp, parity[1])
    elif swap == "codes":
        shutil.copyfile(GOLDEN / "parity_xor" / parity[2].name, parity[2])
    elif swap == "runs":
        other = tmp_path / "other"
        gen.write_group(other, "rs")  # same data, another encoding of it
        blob = bytearray(parity[1].read_bytes())
        blob[:] = blob.replace(gen.GROUP_TAG.encode(), b"golden/ckpt6")
        parity[1].write_bytes(bytes(blob))
    else:
        parity[2].unlink()
        parity[2].symlink_to(victim)
    data[0].unlink()
    _repair("rs", data, parity)
    assert victim.read_bytes() == b"precious"


# ----------------------------------------------------------------------------------------------- state table

STATE = (GOLDEN / "golden_state_v1.json").read_bytes()


def _load_state(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "s.json").write_bytes(blob)
        got = _outcome(lambda: load_state_table(Path(d) / "s.json", install=False))
        if not isinstance(got, FtkitError):
            assert got.dtype == np.int8 and got.ndim == 2 and set(np.unique(got)) <= {0, 1}


@FUZZ
@given(how=_mutations())
def test_state_table_damage(how):
    _load_state(_mutate(STATE, how))


@FUZZ
@given(where=st.sampled_from(["format", "version", "shape", "alive", None]), value=HOSTILE,
       deep=st.none() | DEEP)
def test_state_table_forged(where, value, deep):
    doc = json.loads(STATE)
    if where is None:
        doc = value
    else:
        doc[where] = value
    _load_state(deep.encode() if deep is not None else json.dumps(doc).encode())


# ----------------------------------------------------------------------------------------------- input store

A = np.arange(12.0).reshape(3, 4)


@FUZZ
@given(how=_mutations())
def test_input_store_damage(how):
    with tempfile.TemporaryDirectory() as d:
        store = CheckpointFileStore(d, fsync=False)
        store.save("call/a.0", A)
        p = Path(d) / "call" / "a.0.ftk"
        p.write_bytes(_mutate(p.read_bytes(), how))
        got = _outcome(lambda: store.load("call/a.0"))
        assert isinstance(got, FtkitError) or (got.dtype == A.dtype and got.tobytes() == A.tobytes())


@FUZZ
@given(where=st.sampled_from([["meta"], ["meta", "order"], ["meta", "key"], ["meta", "ftkit_input_store"],
                              ["sections", 0, "dtype"], ["sections", 0, "shape"], ["sections"]]),
       value=HOSTILE)
def test_input_store_header_forged(where, value):
    with tempfile.TemporaryDirectory() as d:
        store = CheckpointFileStore(d, fsync=False)
        store.save("call/a.0", A)
        p = Path(d) / "call" / "a.0.ftk"
        blob = p.read_bytes()
        hlen = fmt.PREAMBLE.unpack(blob[:fmt.PREAMBLE.size])[4]
        doc = json.loads(blob[fmt.PREAMBLE.size:fmt.PREAMBLE.size + hlen])
        _set_path(doc, where, value)
        p.write_bytes(_resign(json.dumps(doc).encode(), hlen) + blob[fmt.PREAMBLE.size + hlen:])
        got = _outcome(lambda: store.load("call/a.0"))
        # Without an outside anchor a re-signed header may re-declare the array; it never crashes the reader.
        assert isinstance(got, (FtkitError, np.ndarray))


@pytest.mark.parametrize("swap", ["key", "symlink"])
def test_input_store_file_swapped_or_linked(tmp_path, swap):
    store = CheckpointFileStore(tmp_path / "s", fsync=False)
    store.save("call/a.0", A)
    store.save("call/a.1", -A)
    target = tmp_path / "s" / "call" / "a.1.ftk"
    target.unlink()
    if swap == "key":
        shutil.copyfile(tmp_path / "s" / "call" / "a.0.ftk", target)
    else:
        target.symlink_to(tmp_path / "s" / "call" / "a.0.ftk")
    got = _outcome(lambda: store.load("call/a.1"))
    assert isinstance(got, FtkitError)
