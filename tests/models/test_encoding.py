"""Encoding time model (eq. 1/2): formulas, fits, the L3 emulation's output, and the measurements."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ftkit.cli import main
from ftkit.codec import RSCode
from ftkit.errors import ModelError
from ftkit.models import EncodingModel
from ftkit.models.encoding import fit_linear, fit_proportional
from ftkit.models.measure import encode_group_files, measure_codec, measure_network, measure_storage

MIB = 1 << 20


def test_eq1_and_eq2_by_hand():
    m = EncodingModel(e=2e-9, r=1e-9, w=3e-9, a=1e-5, b=4e-10, block_size=MIB)
    s, k = 10 * MIB, 4
    # t = 10 blocks of z = 1 MiB: T = t·(r·z + m·(a + b·z + e·z) + w·z)
    t, z = 10, MIB
    assert m.predict(s, k) == pytest.approx(t * (1e-9 * z + k * (1e-5 + 4e-10 * z + 2e-9 * z) + 3e-9 * z))
    assert m.predict_simplified(s, k) == pytest.approx(t * k * 2e-9 * z)       # eq. (2)
    assert m.predict(s, k, network=False, storage=False) == pytest.approx(m.predict_simplified(s, k))
    assert m.predict(s, k, network=False) == pytest.approx(s * (1e-9 + 3e-9) + k * 2e-9 * s)
    # A partial last block costs one more latency but only its own bytes.
    extra = k * 1e-5 + (1e-9 + 3e-9 + k * (4e-10 + 2e-9))
    assert m.predict(s + 1, k) - m.predict(s, k) == pytest.approx(extra)


def test_model_is_linear_in_size_and_group_size():
    m = EncodingModel(e=1e-9, r=1e-10, w=1e-10, a=0.0, b=1e-10)
    assert m.predict(64 * MIB, 4) * 2 == pytest.approx(m.predict(128 * MIB, 4))
    assert m.predict_simplified(64 * MIB, 8) == pytest.approx(2 * m.predict_simplified(64 * MIB, 4))
    assert m.predict(0, 4) == 0.0


def test_bad_model_parameters():
    with pytest.raises(ModelError, match="e = -1"):
        EncodingModel(e=-1.0)
    with pytest.raises(ModelError, match="block size"):
        EncodingModel(e=1e-9, block_size=0)
    with pytest.raises(ModelError, match="group size"):
        EncodingModel(e=1e-9).predict(10, 0)


def test_fits_recover_known_lines():
    xs = [8.0, 1e4, 1e6, 4e6]
    a, b = fit_linear(xs, [2e-6 + 3e-10 * x for x in xs])
    assert a == pytest.approx(2e-6) and b == pytest.approx(3e-10)
    # A negative intercept (noise) is clipped and the slope refitted through the origin.
    a, b = fit_linear([1.0, 2.0], [0.5, 1.5])
    assert a == 0.0 and b == pytest.approx((0.5 + 3.0) / 5.0)
    assert fit_proportional([1.0, 2.0, 4.0], [3.0, 6.0, 12.0]) == pytest.approx(3.0)
    with pytest.raises(ModelError):
        fit_linear([1.0, 1.0], [1.0, 2.0])


def test_emulated_l3_encoding_writes_the_real_parity(tmp_path):
    k, block = 4, 64 << 10
    rng = np.random.default_rng(1)
    sizes = [300_000, 300_000, 250_001, 131_072]   # unequal: shorter files are zero-padded
    datas = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    paths = []
    for j, d in enumerate(datas):
        paths.append(tmp_path / f"m{j}")
        paths[-1].write_bytes(d.tobytes())
    parity_paths = [tmp_path / f"p{j}" for j in range(k)]
    parity_paths[0].write_bytes(b"old parity, replaced")
    seconds = encode_group_files(paths, parity_paths, block)
    assert seconds > 0
    padded = np.zeros((k, max(sizes)), dtype=np.uint8)
    for j, d in enumerate(datas):
        padded[j, : d.size] = d
    expected = RSCode(k, k).encode(list(padded))
    for j in range(k):
        assert parity_paths[j].read_bytes() == expected[j].tobytes()
    with pytest.raises(ModelError, match="k >= 2"):
        encode_group_files(paths[:1], parity_paths[:1])


def test_measure_codec_and_storage(tmp_path):
    e, points = measure_codec((2, 4), block_size=64 << 10, repeats=1)
    assert e > 0 and [p[0] for p in points] == [2, 4] and all(p[2] > 0 for p in points)
    r, w = measure_storage(4 * MIB, 256 << 10, tmp_path, repeats=1)
    assert r > 0 and w > 0
    assert list(tmp_path.iterdir()) == []  # cleaned up
    with pytest.raises(ModelError, match="cannot create"):
        measure_storage(4 * MIB, 256 << 10, tmp_path / "missing", repeats=1)


@pytest.mark.mpi
def test_measure_network_runs_a_ping_pong():
    a, b, points = measure_network(sizes=(8, 1 << 16, 1 << 20), timeout=180.0, repeats=3, rounds=2)
    assert [p[0] for p in points] == [8, 1 << 16, 1 << 20]
    assert all(p[1] > 0 for p in points)
    # The fit is the clipped least-squares line through the measured points. (On a loaded machine the
    # scheduling noise of two busy-polling ranks can hide the per-byte cost, so b = 0 is possible.)
    assert (a, b) == fit_linear([float(p[0]) for p in points], [float(p[1]) for p in points])
    assert a >= 0 and b >= 0
    assert points[-1][1] < 1.0  # 1 MiB one way takes well under a second, even under load


@pytest.mark.mpi
def test_encoding_cli_measure(capsys, tmp_path):
    saved = tmp_path / "params.json"
    code = main(["model", "encoding", "--measure", "--size", "8MiB,16MiB", "--group-size", "4,8",
                 "--block-size", "256KiB", "--dir", str(tmp_path), "--save", str(saved), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    model = data["model"]
    assert model["e"] > 0 and model["r"] > 0 and model["w"] > 0 and model["a"] >= 0 and model["b"] >= 0
    assert model["block_size"] == 256 << 10
    assert len(data["measurements"]["pingpong"]) >= 2
    preds = {(p["size"], p["group_size"]): p for p in data["predictions"]}
    assert set(preds) == {(s, k) for s in (8 * MIB, 16 * MIB) for k in (4, 8)}
    # Eq. (2) doubles with the size and with the group size; eq. (1) is above eq. (2).
    assert preds[(16 * MIB, 4)]["eq2_s"] == pytest.approx(2 * preds[(8 * MIB, 4)]["eq2_s"])
    assert preds[(8 * MIB, 8)]["eq2_s"] == pytest.approx(2 * preds[(8 * MIB, 4)]["eq2_s"])
    assert all(p["eq1_s"] >= p["eq1_local_s"] >= p["eq2_s"] for p in preds.values())
    assert json.loads(saved.read_text())["e"] == pytest.approx(model["e"])


def test_fixed_per_encoding_term_hand_computed():
    # Eq. (1f), ftkit's addition: T = f + eq. (1). s = 2 MiB + 1 byte (t = 3 blocks of 1 MiB), k = 4,
    # e = 1e-9, r = w = a = b = 0, f = 2e-3: T = 2e-3 + 4 · 1e-9 · 2 097 153 = 0.010388612 s.
    m = EncodingModel(e=1e-9, block_size=MIB, f=2e-3)
    assert m.predict(2 * MIB + 1, 4) == pytest.approx(0.010388612)
    assert m.predict(2 * MIB + 1, 4, fixed=False) == pytest.approx(0.008388612)
    assert m.predict(0, 4) == pytest.approx(2e-3)
    assert m.predict_simplified(2 * MIB + 1, 4) == pytest.approx(0.008388612)  # eq. (2) has no f
    # Default f = 0: eq. (1) unchanged; the field is validated like the others.
    assert EncodingModel(e=1e-9).predict(MIB, 4) == EncodingModel(e=1e-9).predict(MIB, 4, fixed=False)
    assert EncodingModel(e=1e-9).f == 0.0
    with pytest.raises(ModelError):
        EncodingModel(e=1e-9, f=-1.0)


def test_measure_fixed(tmp_path):
    from ftkit.models.measure import measure_fixed

    f, points = measure_fixed((2, 4), block_size=64 << 10, directory=tmp_path, repeats=2)
    assert [p[0] for p in points] == [2, 4]
    assert f == fit_proportional([2.0, 4.0], [points[0][1], points[1][1]])
    assert 0 <= f < 1.0
    assert list(tmp_path.iterdir()) == []  # temporary files removed
