"""Tests of ftkit.codec against an independent, plainly written GF(2^8) reference."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftkit.codec import ErasureCode, RSCode, XORCode, xor_into
from ftkit.codec._isal import ISAL_ENV, library
from ftkit.errors import CodecError

# ---------------------------------------------------------------------------------------------------------
# Independent reference: GF(2^8) with polynomial x^8+x^4+x^3+x^2+1, log/antilog tables, written out plainly.
# ---------------------------------------------------------------------------------------------------------
REF_EXP = [0] * 255
REF_LOG = [0] * 256
_v = 1
for _i in range(255):
    REF_EXP[_i] = _v
    REF_LOG[_v] = _i
    _v = _v * 2
    if _v >= 256:
        _v = _v ^ 0x11D


def ref_mul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    return REF_EXP[(REF_LOG[a] + REF_LOG[b]) % 255]


def ref_inv(a: int) -> int:
    return REF_EXP[(255 - REF_LOG[a]) % 255]


def ref_matvec(matrix: np.ndarray, data: list[np.ndarray]) -> list[np.ndarray]:
    """out[i][t] = sum_j matrix[i][j] * data[j][t], byte by byte."""
    out = []
    for row in matrix:
        acc = [0] * (len(data[0]) if data else 0)
        for coef, frag in zip(row, data, strict=True):
            for t, byte in enumerate(frag):
                acc[t] ^= ref_mul(int(coef), int(byte))
        out.append(np.array(acc, dtype=np.uint8))
    return out


def ref_is_invertible(matrix: list[list[int]]) -> bool:
    """Gaussian elimination with the reference arithmetic."""
    a = [list(map(int, row)) for row in matrix]
    n = len(a)
    for col in range(n):
        piv = next((r for r in range(col, n) if a[r][col]), None)
        if piv is None:
            return False
        a[col], a[piv] = a[piv], a[col]
        inv = ref_inv(a[col][col])
        a[col] = [ref_mul(inv, v) for v in a[col]]
        for r in range(n):
            if r != col and a[r][col]:
                f = a[r][col]
                a[r] = [x ^ ref_mul(f, y) for x, y in zip(a[r], a[col], strict=True)]
    return True


def rand_frags(rng: np.random.Generator, count: int, nbytes: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(count)]


# ---------------------------------------------------------------------------------------------------------
# Generator matrix: parity = generator x data; MDS.
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,m", [(1, 1), (1, 3), (3, 1), (4, 4), (8, 8), (10, 4), (4, 1), (5, 3), (16, 16)])
def test_parity_equals_generator_times_data(k: int, m: int) -> None:
    rng = np.random.default_rng(k * 100 + m)
    code = RSCode(k, m)
    gen = code.generator_matrix
    assert np.array_equal(gen[:k], np.eye(k, dtype=np.uint8)), "the code must be systematic"
    for nbytes in (0, 1, 7, 37):
        data = rand_frags(rng, k, nbytes)
        parity = code.encode(data)
        expected = ref_matvec(gen[k:], data)
        for i in range(m):
            assert np.array_equal(parity[i], expected[i]), f"parity {i} differs from generator x data"


def test_matrix_is_a_pure_function_of_k_m() -> None:
    assert np.array_equal(RSCode(10, 4).parity_matrix, RSCode(10, 4).parity_matrix)
    assert np.array_equal(RSCode(6, 1).parity_matrix, np.ones((1, 6), dtype=np.uint8))


@pytest.mark.parametrize("k,m", [(1, 1), (2, 2), (3, 3), (4, 4), (4, 1), (5, 3), (6, 2), (3, 6), (8, 4)])
def test_every_k_by_k_submatrix_invertible_exhaustive(k: int, m: int) -> None:
    gen = RSCode(k, m).generator_matrix.tolist()
    for rows in itertools.combinations(range(k + m), k):
        assert ref_is_invertible([gen[r] for r in rows]), f"rows {rows} of the generator are singular"


@pytest.mark.parametrize("k,m", [(10, 4), (12, 4), (8, 4), (6, 6), (5, 5), (8, 8)])
def test_every_square_submatrix_of_parity_invertible_exhaustive(k: int, m: int) -> None:
    # [I; C] is MDS iff every square submatrix of C is invertible; these sizes use searched matrices.
    c = RSCode(k, m).parity_matrix.tolist()
    for size in range(1, min(k, m) + 1):
        for rows in itertools.combinations(range(m), size):
            for cols in itertools.combinations(range(k), size):
                sub = [[c[r][col] for col in cols] for r in rows]
                assert ref_is_invertible(sub), f"parity rows {rows} x columns {cols} singular"


@pytest.mark.parametrize("k,m", [(8, 8), (10, 4), (16, 16), (20, 12), (31, 1), (1, 31)])
def test_every_k_by_k_submatrix_invertible_sampled(k: int, m: int) -> None:
    # Every square submatrix of the parity part must be invertible (equivalent to MDS for [I; C]).
    c = RSCode(k, m).parity_matrix.tolist()
    rng = np.random.default_rng(k * 1000 + m)
    for size in range(1, min(k, m) + 1):
        for _ in range(40):
            rows = sorted(rng.choice(m, size, replace=False))
            cols = sorted(rng.choice(k, size, replace=False))
            sub = [[c[r][col] for col in cols] for r in rows]
            assert ref_is_invertible(sub), f"parity rows {rows} x columns {cols} singular"


# ---------------------------------------------------------------------------------------------------------
# Round trips (hypothesis).
# ---------------------------------------------------------------------------------------------------------
@st.composite
def code_and_erasures(draw):
    k = draw(st.integers(1, 31))
    m = draw(st.integers(1, 32 - k))
    nbytes = draw(st.one_of(st.integers(0, 40), st.integers(0, 9000)))
    lost = draw(st.lists(st.integers(0, k + m - 1), max_size=m, unique=True))
    seed = draw(st.integers(0, 2**32 - 1))
    return k, m, nbytes, lost, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(code_and_erasures())
def test_decode_recovers_data_after_up_to_m_erasures(params) -> None:
    k, m, nbytes, lost, seed = params
    rng = np.random.default_rng(seed)
    code = RSCode(k, m)
    data = rand_frags(rng, k, nbytes)
    parity = code.encode(data)
    frags = {i: f for i, f in enumerate(data + parity) if i not in lost}
    decoded = code.decode(frags)
    assert len(decoded) == k
    for j in range(k):
        assert np.array_equal(decoded[j], data[j]), f"data fragment {j} wrong after losing {lost}"
    rebuilt = code.reconstruct(frags, lost)
    for idx, frag in zip(lost, rebuilt, strict=True):
        assert np.array_equal(frag, (data + parity)[idx]), f"fragment {idx} rebuilt wrong"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 31), st.integers(0, 3000), st.integers(0, 2**32 - 1), st.data())
def test_xor_code_round_trip(k: int, nbytes: int, seed: int, draw) -> None:
    rng = np.random.default_rng(seed)
    code = XORCode(k)
    data = rand_frags(rng, k, nbytes)
    (parity,) = code.encode(data)
    expected = np.zeros(nbytes, dtype=np.uint8)
    for d in data:
        expected ^= d
    assert np.array_equal(parity, expected)
    lost = draw.draw(st.integers(0, k))
    frags = {i: f for i, f in enumerate(data + [parity]) if i != lost}
    for j, frag in enumerate(code.decode(frags)):
        assert np.array_equal(frag, data[j])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 8), st.integers(0, 200), st.data())
def test_more_than_m_erasures_is_a_clear_error(k: int, m: int, nbytes: int, draw) -> None:
    code = RSCode(k, m)
    data = rand_frags(np.random.default_rng(1), k, nbytes)
    frags = dict(enumerate(data + code.encode(data)))
    lost = draw.draw(st.lists(st.integers(0, k + m - 1), min_size=m + 1, max_size=k + m, unique=True))
    for i in lost:
        del frags[i]
    with pytest.raises(CodecError, match=f"need at least k={k}"):
        code.decode(frags)


# ---------------------------------------------------------------------------------------------------------
# Buffers: views, offsets, zero length, other dtypes, streaming, parity rows.
# ---------------------------------------------------------------------------------------------------------
def test_unaligned_views_of_one_buffer() -> None:
    rng = np.random.default_rng(3)
    code = RSCode(5, 3)
    nbytes = 5000 + 3
    buf = rng.integers(0, 256, 5 * nbytes + 11, dtype=np.uint8)
    data = [buf[1 + j * nbytes: 1 + (j + 1) * nbytes] for j in range(5)]  # odd offsets
    out_buf = np.zeros(3 * nbytes + 5, dtype=np.uint8)
    parity = [out_buf[3 + i * nbytes: 3 + (i + 1) * nbytes] for i in range(3)]
    code.encode_into(data, parity)
    expected = code.encode([d.copy() for d in data])
    for i in range(3):
        assert np.array_equal(parity[i], expected[i])
    assert out_buf[:3].tolist() == [0, 0, 0] and out_buf[-2:].tolist() == [0, 0], "wrote outside the views"
    rows = np.stack([d.copy() for d in data])  # a 2-D array with k rows is a sequence of k fragments
    assert all(np.array_equal(a, b) for a, b in zip(code.encode(rows), expected, strict=True))


def test_other_dtypes_viewed_as_bytes() -> None:
    code = RSCode(3, 2)
    arrays = [np.arange(100, dtype=np.float64) * j for j in range(3)]
    data = [a.view(np.uint8) for a in arrays]
    parity = code.encode(data)
    back = code.decode({0: data[0], 3: parity[0], 4: parity[1]})
    assert np.array_equal(back[1].view(np.float64), arrays[1])
    assert np.array_equal(back[2].view(np.float64), arrays[2])


def test_read_only_and_memory_mapped_inputs(tmp_path) -> None:
    code = RSCode(3, 2)
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 256, 3 * 1001, dtype=np.uint8)
    frozen = np.frombuffer(raw.tobytes(), dtype=np.uint8)  # read-only, as read from a file
    assert not frozen.flags.writeable
    data = [frozen[j * 1001:(j + 1) * 1001] for j in range(3)]
    parity = code.encode(data)
    path = tmp_path / "frags.bin"
    np.concatenate([raw, *parity]).tofile(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    frags = {1: mm[1001:2002], 3: mm[3003:4004], 4: mm[4004:5005]}
    for j, frag in enumerate(code.decode(frags)):
        assert np.array_equal(frag, data[j])


def test_zero_length_fragments() -> None:
    code = RSCode(4, 2)
    data = [np.empty(0, dtype=np.uint8) for _ in range(4)]
    parity = code.encode(data)
    assert [p.shape for p in parity] == [(0,), (0,)]
    assert [d.shape for d in code.decode({2: data[2], 3: data[3], 4: parity[0], 5: parity[1]})] == [(0,)] * 4


@pytest.mark.parametrize("code", [RSCode(4, 4), RSCode(10, 4), XORCode(4)], ids=repr)
@pytest.mark.parametrize("chunk", [1, 7, 4096, 100_003])
def test_streaming_equals_whole(code: ErasureCode, chunk: int) -> None:
    rng = np.random.default_rng(chunk)
    nbytes = 250_001
    data = rand_frags(rng, code.k, nbytes)
    whole = code.encode(data)
    streamed = [np.empty(nbytes, dtype=np.uint8) for _ in range(code.m)]
    if chunk == 1:
        nbytes = 300  # keep the byte-by-byte case short
        data = [d[:nbytes] for d in data]
        whole = [w[:nbytes] for w in whole]
        streamed = [s[:nbytes] for s in streamed]
    for off in range(0, nbytes, chunk):
        end = min(off + chunk, nbytes)
        code.encode_into([d[off:end] for d in data], [s[off:end] for s in streamed])
    for i in range(code.m):
        assert np.array_equal(streamed[i], whole[i]), f"parity {i} differs, {chunk}-byte chunks"


def test_parity_indices_compute_single_rows() -> None:
    rng = np.random.default_rng(5)
    code = RSCode(6, 4)
    data = rand_frags(rng, 6, 3001)
    full = code.encode(data)
    for rows in ([2], [3, 0], [1, 2, 3]):
        outs = [np.zeros(3001, dtype=np.uint8) for _ in rows]
        code.encode_into(data, outs, parity_indices=rows)
        for out, r in zip(outs, rows, strict=True):
            assert np.array_equal(out, full[r]), f"parity row {r} computed alone differs"


def test_reconstruct_returns_given_fragments_and_rebuilds_parity() -> None:
    rng = np.random.default_rng(6)
    code = RSCode(4, 3)
    data = rand_frags(rng, 4, 999)
    parity = code.encode(data)
    frags = {0: data[0], 2: data[2], 5: parity[1], 6: parity[2]}
    out = code.reconstruct(frags, [4, 0, 1, 5])
    assert np.array_equal(out[0], parity[0])
    assert out[1] is data[0]
    assert np.array_equal(out[2], data[1])
    assert out[3] is parity[1]


@pytest.mark.parametrize("code", [RSCode(4, 3), RSCode(16, 16), XORCode(5)], ids=repr)
def test_reconstruct_into_fills_the_callers_arrays_like_reconstruct(code: ErasureCode) -> None:
    """Patterns of 1 to m lost fragments (4 random ones per count): the arrays given receive exactly what
    ``reconstruct`` returns, and nothing else is written (the bytes around each output stay)."""
    rng = np.random.default_rng(16)
    data = rand_frags(rng, code.k, 1001)
    frags = dict(enumerate(data + code.encode(data)))
    patterns = [tuple(int(i) for i in rng.choice(code.k + code.m, r, replace=False))
                for r in range(1, code.m + 1) for _ in range(4)]
    for lost in patterns:
        given = {i: f for i, f in frags.items() if i not in lost}
        wanted = list(reversed(lost))
        space = [np.full(1001 + 32, 0xA5, np.uint8) for _ in wanted]
        code.reconstruct_into(given, wanted, [s[16:-16] for s in space])
        for w, s in zip(wanted, space, strict=True):
            assert np.array_equal(s[16:-16], frags[w]), (lost, w)
            assert (s[:16] == 0xA5).all() and (s[-16:] == 0xA5).all(), "wrote outside its output"


def test_reconstruct_into_refuses_given_fragments_overlaps_and_bad_outputs() -> None:
    code = RSCode(4, 2)
    rng = np.random.default_rng(17)
    data = rand_frags(rng, 4, 512)
    parity = code.encode(data)
    given = {1: data[1], 2: data[2], 3: data[3], 4: parity[0]}
    with pytest.raises(CodecError, match=r"wanted fragments \[1\] are given"):
        code.reconstruct_into(given, [0, 1], [np.empty(512, np.uint8), np.empty(512, np.uint8)])
    with pytest.raises(CodecError, match="overlaps"):
        code.reconstruct_into(given, [0], [data[2]])
    with pytest.raises(CodecError, match="has 511 bytes, expected 512"):
        code.reconstruct_into(given, [0], [np.empty(511, np.uint8)])
    with pytest.raises(CodecError, match="expected 2 output arrays, got 1"):
        code.reconstruct_into(given, [0, 5], [np.empty(512, np.uint8)])
    out = np.empty(512, np.uint8)
    code.reconstruct_into(given, [0], [out])
    assert np.array_equal(out, data[0])


def test_two_threads_encode_concurrently() -> None:
    code = RSCode(8, 4)
    rng = np.random.default_rng(7)
    inputs = [rand_frags(rng, 8, 1 << 20) for _ in range(2)]
    expected = [code.encode(d) for d in inputs]
    results: list[list[np.ndarray] | None] = [None, None]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for _ in range(5):
                results[t] = code.encode(inputs[t])
                assert all(np.array_equal(a, b) for a, b in zip(results[t], expected[t], strict=True))
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "encoder threads hung"
    assert not errors, errors
    for t in range(2):
        assert results[t] is not None
        for a, b in zip(results[t], expected[t], strict=True):
            assert np.array_equal(a, b)


def test_xor_into() -> None:
    rng = np.random.default_rng(8)
    a, b = rng.integers(0, 256, (2, 1027), dtype=np.uint8)
    expected = a ^ b
    first = int(a[0])
    out = xor_into(a[1:], b[1:])  # odd offset, odd length
    assert np.array_equal(out, expected[1:])
    assert np.array_equal(a[1:], expected[1:]) and a[0] == first, "xor_into must work in place, in bounds"
    with pytest.raises(CodecError, match="1026 bytes but src has 1025"):
        xor_into(a[1:], b[2:])


# ---------------------------------------------------------------------------------------------------------
# Errors name the problem.
# ---------------------------------------------------------------------------------------------------------
def test_bad_arguments_raise_codec_error_naming_the_problem() -> None:
    code = RSCode(3, 2)
    ok = [np.zeros(10, dtype=np.uint8) for _ in range(3)]
    with pytest.raises(CodecError, match="k >= 1"):
        RSCode(0, 2)
    with pytest.raises(CodecError, match="k \\+ m <= 256"):
        RSCode(200, 57)
    with pytest.raises(CodecError, match="1 <= k <= 255"):
        XORCode(0)
    with pytest.raises(CodecError, match="expected k=3 data fragments, got 2"):
        code.encode(ok[:2])
    with pytest.raises(CodecError, match="data fragment 2 has 9 bytes but data fragment 0 has 10"):
        code.encode([ok[0], ok[1], np.zeros(9, dtype=np.uint8)])
    with pytest.raises(CodecError, match="data fragment 1 has dtype float64"):
        code.encode([ok[0], np.zeros(10), ok[2]])
    with pytest.raises(CodecError, match="data fragment 0 is not contiguous"):
        code.encode([np.zeros(20, dtype=np.uint8)[::2], ok[1], ok[2]])
    with pytest.raises(CodecError, match="data fragment 0 has 2 dimensions"):
        code.encode([np.zeros((2, 5), dtype=np.uint8), ok[1], ok[2]])
    ro = np.zeros(10, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(CodecError, match="parity output 1 is read-only"):
        code.encode_into(ok, [np.zeros(10, dtype=np.uint8), ro])
    with pytest.raises(CodecError, match="parity output 0 has 11 bytes, expected 10"):
        code.encode_into(ok, [np.zeros(11, dtype=np.uint8), np.zeros(10, dtype=np.uint8)])
    with pytest.raises(CodecError, match="parity index 2 is out of range 0..1"):
        code.encode_into(ok, [np.zeros(10, dtype=np.uint8)], parity_indices=[2])
    with pytest.raises(CodecError, match="parity index 1 is given twice"):
        code.encode_into(ok, [np.zeros(10, dtype=np.uint8)] * 2, parity_indices=[1, 1])
    with pytest.raises(CodecError, match="fragment index 5 is out of range 0..4"):
        code.decode({0: ok[0], 1: ok[1], 5: ok[2]})
    with pytest.raises(CodecError, match="fragment 4 has 9 bytes but fragment 0 has 10"):
        code.decode({0: ok[0], 1: ok[1], 4: np.zeros(9, dtype=np.uint8)})
    with pytest.raises(CodecError, match="need at least k=3 of the 5 fragments, got 2"):
        code.decode({0: ok[0], 4: ok[1]})
    with pytest.raises(CodecError, match="wanted index 7 is out of range"):
        code.reconstruct(dict(enumerate(ok)), [7])
    with pytest.raises(CodecError, match="wanted index 1 is given twice"):
        code.reconstruct(dict(enumerate(ok)), [1, 1])
    buf = np.zeros(40, dtype=np.uint8)
    with pytest.raises(CodecError, match="parity output 0 overlaps data fragment 1"):
        code.encode_into([buf[0:10], buf[10:20], buf[20:30]], [buf[15:25], np.zeros(10, dtype=np.uint8)])
    with pytest.raises(CodecError, match="parity output 0 overlaps parity output 1"):
        code.encode_into(ok, [buf[0:10], buf[5:15]])
    with pytest.raises(CodecError, match="must be a numpy.ndarray"):
        code.encode([b"0123456789", ok[1], ok[2]])


# ---------------------------------------------------------------------------------------------------------
# Golden file: the code is part of the on-disk format.
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["default", "numba"])
def test_golden_matrices_and_parity_never_change(backend, monkeypatch) -> None:
    import hashlib
    import json
    from pathlib import Path

    if backend == "numba":
        monkeypatch.setenv(ISAL_ENV, "0")
    golden = json.loads((Path(__file__).parent / "golden" / "rs_codes.json").read_text())
    t = np.arange(1000)
    for entry in golden["codes"]:
        k, m = entry["k"], entry["m"]
        code = RSCode(k, m)
        assert code.parity_matrix.tolist() == entry["parity_matrix"], f"parity matrix of ({k}, {m}) changed"
        data = [((31 * j + 7 * t + (t >> 3)) & 255).astype(np.uint8) for j in range(k)]
        parity = code.encode(data)
        digest = hashlib.sha256(b"".join(p.tobytes() for p in parity)).hexdigest()
        assert digest == entry["parity_sha256"], f"parity bytes of ({k}, {m}) changed"
        # The reference arithmetic agrees with the frozen matrix too.
        expected = ref_matvec(np.array(entry["parity_matrix"]), data)
        assert all(np.array_equal(a, b) for a, b in zip(parity, expected, strict=True))


def test_kernels_release_the_gil_and_cache_to_disk() -> None:
    from ftkit.codec import _kernels

    for kernel in (_kernels.run_schedule, _kernels.xor_into_kernel):
        assert kernel.targetoptions.get("nogil") is True, f"{kernel} holds the GIL"
        assert kernel._cache.__class__.__name__ != "NullCache", f"{kernel} is not cached on disk"


# ---------------------------------------------------------------------------------------------------------
# Backends: ISA-L (where a libisal is found) and ftkit's numba kernels give the same bytes.
# ---------------------------------------------------------------------------------------------------------
def _encode_and_rebuild(k, m, data, lost, backend, monkeypatch):
    """Parity of ``data`` and its ``lost`` fragments rebuilt, on backend ``backend`` ("" ISA-L, "0" numba)."""
    monkeypatch.setenv(ISAL_ENV, backend)
    code = RSCode(k, m)
    parity = code.encode(data)
    frags = {i: f for i, f in enumerate(data + parity) if i not in lost}
    return parity, code.reconstruct(frags, lost)


@pytest.mark.skipif(library() is None, reason="no libisal on this machine (pip install pyeclib)")
@pytest.mark.parametrize(("k", "m"), [(4, 4), (8, 8), (16, 16), (10, 4), (4, 1), (3, 2)])
def test_isal_and_numba_backends_agree(k, m, monkeypatch) -> None:
    rng = np.random.default_rng(k * 31 + m)
    buf = rng.integers(0, 256, k * 4099 + 3, dtype=np.uint8)
    data = [buf[1 + j * 4099:1 + (j + 1) * 4099] for j in range(k)]   # odd lengths, unaligned views
    lost = list(range(min(m, k)))
    (p1, r1), (p2, r2) = (_encode_and_rebuild(k, m, data, lost, b, monkeypatch) for b in ("", "0"))
    assert all(np.array_equal(a, b) for a, b in zip(p1, p2, strict=True))
    assert all(np.array_equal(a, data[i]) for a, i in zip(r1, lost, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(r1, r2, strict=True))


@pytest.mark.skipif(library() is None, reason="no libisal on this machine (pip install pyeclib)")
@pytest.mark.parametrize(("k", "m"), [(8, 8), (16, 16), (7, 7)])
def test_isal_blocked_long_fragments_agree_with_numba(k, m, monkeypatch) -> None:
    # Above 6 parity rows ISA-L is applied in blocks (_isal.block_bytes): fragments of 2.5 blocks plus an odd
    # tail, read-only data views (the other address path), against the numba kernels in one call.
    from ftkit.codec._isal import block_bytes

    n = 2 * block_bytes(k, m) + block_bytes(k, m) // 2 + 4099
    rng = np.random.default_rng(k)
    buf = rng.integers(0, 256, k * n + 1, dtype=np.uint8)
    buf.flags.writeable = False
    data = [buf[1 + j * n:1 + (j + 1) * n] for j in range(k)]
    lost = [0, k + 1]
    (p1, r1), (p2, r2) = (_encode_and_rebuild(k, m, data, lost, b, monkeypatch) for b in ("", "0"))
    assert all(np.array_equal(a, b) for a, b in zip(p1, p2, strict=True))
    assert np.array_equal(r1[0], data[0]) and np.array_equal(r1[1], p1[1])
    assert all(np.array_equal(a, b) for a, b in zip(r1, r2, strict=True))


def test_isal_variable_names_a_bad_library(monkeypatch, tmp_path) -> None:
    bogus = tmp_path / "libnot.so"
    bogus.write_bytes(b"not a library")
    monkeypatch.setenv(ISAL_ENV, str(bogus))
    with pytest.raises(CodecError, match=ISAL_ENV):
        RSCode(4, 4).encode([np.zeros(8, np.uint8)] * 4)
