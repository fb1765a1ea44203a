"""``ftkit model ...``: output, PNG plot, and clear errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ftkit.cli import main
from ftkit.models import catastrophic_probability, daly_interval


def run(capsys, *argv):
    code = main(["model", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_interval_cli(capsys):
    code, out, _ = run(capsys, "interval", "--cost", "12s", "--mtbf", "6h")
    assert code == 0
    assert "720.0 s" in out and "712.0 s" in out
    code, out, _ = run(capsys, "interval", "--cost", "30min", "--mtbf", "1d", "--json")
    data = json.loads(out)
    assert data["young_s"] == pytest.approx((2 * 1800 * 86400) ** 0.5)
    assert data["daly_s"] == pytest.approx(daly_interval(1800, 86400))
    assert 0 < data["daly_waste"] < 1


@pytest.mark.parametrize("argv,match", [
    (["interval", "--cost", "12parsec", "--mtbf", "6h"], "unknown unit 'parsec'"),
    (["interval", "--cost", "0s", "--mtbf", "6h"], "checkpoint cost must be a positive"),
    (["reliability", "--nodes", "1000", "--group-sizes", "3"], "group size k = 3 does not divide"),
    (["reliability", "--nodes", "16", "--group-sizes", "4", "--tolerance", "4", "--failed", "3"],
     r"t = 4 tolerated failures per group must be in \[0, k-1\]"),
    (["reliability", "--nodes", "16", "--group-sizes", "4", "--failed", "17"], "outside"),
    (["reliability", "--nodes", "sixteen"], "--nodes 'sixteen' is not an integer"),
    (["reliability", "--schemes", "raid6"], "unknown protection scheme 'raid6'"),
    (["reliability", "--failures", "/nonexistent/log.csv"], "cannot read failure log"),
    (["encoding"], "no encoding parameters"),
    (["encoding", "--e", "fast"], "--e 'fast' is not a number"),
    (["encoding", "--e", "1e-9", "--size", "12 parsecs"], "unknown unit"),
])
def test_bad_arguments_give_clear_errors(capsys, argv, match):
    import re

    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("ftkit model: error:")
    assert re.search(match, err), err
    assert "Traceback" not in err


def test_reliability_conditional_table(capsys):
    code, out, _ = run(capsys, "reliability", "--nodes", "1408", "--group-sizes", "4,8", "--failed", "20",
                       "--trials", "2000", "--seed", "1", "--json")
    assert code == 0
    rows = json.loads(out)
    expected = {(s, k) for s in ("rs", "xor", "partner") for k in (4, 8)}
    assert {(r["scheme"], r["group_size"]) for r in rows} == expected
    xor4 = next(r for r in rows if r["scheme"] == "xor" and r["group_size"] == 4)
    assert xor4["exact"] == pytest.approx(catastrophic_probability(1408, 4, 1, 20))
    assert xor4["mc"][1] <= xor4["exact"] <= xor4["mc"][2]


def test_reliability_plot_is_a_valid_png(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (the `plot` extra)")
    pytest.importorskip("PIL", reason="reading the PNG back needs Pillow (comes with matplotlib)")
    out_png = tmp_path / "out.png"
    code, out, _ = run(capsys, "reliability", "--nodes", "1408", "--group-sizes", "4,8,16",
                       "--plot", str(out_png))
    assert code == 0
    assert "RS (FTI" in out and "XOR (SCR" in out and "partner" in out and "scenario 2" in out
    data = out_png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(out_png) as img:
        img.verify()
    with Image.open(out_png) as img:
        width, height = img.size
        assert width >= 800 and height >= 300  # two panels side by side
        pixels = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert pixels is not None and len(pixels) > 50  # something was drawn, not a blank canvas


def test_plot_without_matplotlib_is_a_clear_error(tmp_path):
    # A fresh interpreter in which importing matplotlib fails, as where it is not installed.
    code = ("import sys; sys.modules['matplotlib'] = None; from ftkit.cli import main; "
            f"sys.exit(main(['model', 'reliability', '--nodes', '64', '--group-sizes', '4', "
            f"'--plot', {str(tmp_path / 'p.png')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "needs matplotlib" in proc.stderr and "ftkit[plot]" in proc.stderr
    assert not (tmp_path / "p.png").exists()


def test_reliability_with_user_log(capsys, tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("x,count\n1,90\n3,10\n")
    code, out, _ = run(capsys, "reliability", "--nodes", "64", "--group-sizes", "4,8", "--schemes", "xor",
                       "--failures", str(log), "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows[0]["probability"] == pytest.approx(0.1 * catastrophic_probability(64, 4, 1, 3))


def test_encoding_cli_with_given_parameters(capsys, tmp_path):
    saved = tmp_path / "p.json"
    code, out, _ = run(capsys, "encoding", "--e", "1e-9", "--r", "1e-10", "--w", "2e-10", "--a", "1e-6",
                       "--b", "1e-10", "--size", "64MiB", "--group-size", "4", "--block-size", "1MiB",
                       "--save", str(saved), "--json")
    assert code == 0
    pred = json.loads(out)["predictions"][0]
    s = 64 * 2**20
    assert pred["eq2_s"] == pytest.approx(4 * 1e-9 * s)
    assert pred["eq1_s"] == pytest.approx(s * 3e-10 + 4 * (64 * 1e-6 + s * (1e-10 + 1e-9)))
    code, out, _ = run(capsys, "encoding", "--params", str(saved), "--size", "64MiB", "--group-size", "4",
                       "--json")
    assert json.loads(out)["predictions"][0]["eq1_s"] == pytest.approx(pred["eq1_s"])


def test_entry_point_runs_as_module():
    cmd = [sys.executable, "-m", "ftkit", "model", "interval", "--mtbf", "6h", "--cost"]
    proc = subprocess.run([*cmd, "12s"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Daly" in proc.stdout
    proc = subprocess.run([*cmd, "x"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a duration" in proc.stderr
