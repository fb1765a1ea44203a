"""Direct I/O for large L4 files (:mod:`ftkit.storage._direct`, ``AtomicWriter(direct=True)``, issue 37):
the same bytes as a buffered write, whatever the alignment; the previous file kept when a writer is killed
mid-file; a clear error where the file system refuses ``O_DIRECT`` and, in the writers, a silent fallback to
buffered writes there (a real ramfs, and a real tmpfs, mounted for the test)."""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ftkit.checkpoint.levels.pfs import pfs_work
from ftkit.errors import DirectIOUnsupported, StorageError
from ftkit.storage._direct import ALIGN, DIRECT_CHUNK, DIRECT_MIN_BYTES, enable_direct
from ftkit.storage._fsutil import AtomicWriter, is_temp_name
from ftkit.storage.format.container import read_arrays, verify_file, write_file
from ftkit.storage.placement.global_dir import PFSLevel

SIZES = [0, 1, ALIGN - 1, ALIGN, ALIGN + 5, DIRECT_CHUNK - 3, DIRECT_CHUNK, 2 * DIRECT_CHUNK + 77,
         3 * DIRECT_CHUNK + ALIGN + 1]


@pytest.fixture
def ramfs(tmp_path):
    """A real ramfs (no direct I/O at all) mounted in ``tmp_path`` (root), unmounted at teardown."""
    if os.geteuid() != 0:
        pytest.skip("mounting a ramfs needs root")
    point = tmp_path / "ramfs"
    point.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(point)], check=True, timeout=30)
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False, timeout=30)


def _cached_fraction(path) -> float:
    """Fraction of the file's pages in the page cache, as the kernel reports it (``mincore``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = (ctypes.c_ubyte * pages)()
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(v & 1 for v in vec) / pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def _write_like_a_checkpoint(path, data: bytes, head: int, piece: int, direct: bool) -> AtomicWriter:
    """Write ``data`` as the container writer does: a placeholder head at 0, the rest in sequential pieces
    of ``piece`` bytes, then the real head over the placeholder; commit."""
    w = AtomicWriter(path, direct=direct)
    w.pwrite(b"\0" * head, 0)
    for at in range(head, len(data), piece):
        w.pwrite(data[at:at + piece], at)
    w.pwrite(data[:head], 0)
    w.commit()
    return w


@pytest.mark.parametrize("size", SIZES)
def test_a_direct_write_stores_exactly_the_bytes_a_buffered_one_does(tmp_path, size):
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    head = min(size, 301)
    w = _write_like_a_checkpoint(tmp_path / "d.bin", data, head, 3 * (1 << 20) + 17, direct=True)
    assert w.direct is True                        # ext4 under /tmp takes O_DIRECT
    assert (tmp_path / "d.bin").read_bytes() == data
    assert os.listdir(tmp_path) == ["d.bin"]       # no temporary file left, the size exact (no padding)


def test_the_direct_writer_has_the_descriptor_in_direct_mode_and_rejects_scattered_writes(tmp_path):
    w = AtomicWriter(tmp_path / "f.bin", direct=True)
    assert fcntl.fcntl(w.fd, fcntl.F_GETFL) & os.O_DIRECT
    w.pwrite(b"h" * 100, 0)
    w.pwrite(b"x" * DIRECT_CHUNK, 100)
    with pytest.raises(StorageError, match="continue the file"):
        w.pwrite(b"y", 10 * DIRECT_CHUNK)           # a hole: the direct stream writes front to back only
    w.abort()
    assert os.listdir(tmp_path) == []
    plain = AtomicWriter(tmp_path / "g.bin")        # not asked for: buffered, as before
    assert plain.direct is False and not fcntl.fcntl(plain.fd, fcntl.F_GETFL) & os.O_DIRECT
    plain.abort()


def test_a_large_l4_file_is_written_direct_and_reads_back_bit_for_bit(tmp_path):
    n = DIRECT_MIN_BYTES // 8 + 12345                      # just over the threshold, not page-aligned
    arrays = [("u", np.arange(n, dtype=np.float64) * 0.5), ("step", np.array([7], np.int64))]
    level = PFSLevel(tmp_path / "global", "exec", [0])
    info = level.write(3, 0, arrays, level=4, nranks=1)
    plain = write_file(tmp_path / "plain.ftk", arrays, rank=0, level=4, ckpt_id=3, exec_id="exec", nranks=1)
    path = level.path(3, 0)
    # The L4 file bypassed the page cache (none of its pages are there), the plain one did not.
    assert _cached_fraction(path) < 0.01 < 0.5 < _cached_fraction(tmp_path / "plain.ftk")
    assert info.digest == plain.digest and path.read_bytes() == (tmp_path / "plain.ftk").read_bytes()
    verify_file(path, expect_digest=info.digest)
    got = read_arrays(path)
    assert np.array_equal(got["u"], arrays[0][1]) and got["step"][0] == 7


def test_a_writer_killed_mid_file_leaves_the_previous_file_whole(tmp_path):
    # A real process writes a large file directly and is killed (SIGKILL) after its first chunks are on
    # their way: the committed previous version must be untouched, and the next writer clears the leftover.
    path = tmp_path / "l4" / "rank0.ftk"
    old = np.arange(DIRECT_MIN_BYTES // 8 + 3, dtype=np.uint64)
    write_file(path, [("u", old)], rank=0, level=4, ckpt_id=1, exec_id="e", nranks=1, direct=True)
    before = path.read_bytes()
    program = textwrap.dedent(f"""
        import sys
        from ftkit.storage._fsutil import AtomicWriter
        w = AtomicWriter({str(path)!r}, direct=True)
        w.pwrite(b"H" * 512, 0)
        w.pwrite(b"D" * (3 * {DIRECT_CHUNK}), 512)
        print("direct" if w.direct else "buffered", flush=True)
        sys.stdin.read()          # held here until killed
    """)
    p = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ))
    try:
        line = p.stdout.readline().strip()
        assert line == "direct"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    leftovers = [n for n in os.listdir(path.parent) if is_temp_name(n, path.name)]
    assert len(leftovers) == 1
    write_file(path, [("u", old + np.uint64(1))], rank=0, level=4, ckpt_id=2, exec_id="e", nranks=1,
               direct=True)
    assert sorted(os.listdir(path.parent)) == ["rank0.ftk"]
    assert np.array_equal(read_arrays(path)["u"], old + np.uint64(1))


def test_a_file_system_refusing_direct_io_is_a_clear_error_and_the_writers_fall_back(ramfs):
    fd = os.open(ramfs / "probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(DirectIOUnsupported, match="refuses direct I/O"):
            enable_direct(fd, ramfs / "probe")
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT   # left as it was
    finally:
        os.close(fd)
    data = os.urandom(2 * DIRECT_CHUNK + 999)
    w = _write_like_a_checkpoint(ramfs / "f.bin", data, 300, 1 << 20, direct=True)
    assert w.direct is False                           # silently buffered
    assert (ramfs / "f.bin").read_bytes() == data
    arrays = [("u", np.arange(DIRECT_MIN_BYTES // 8 + 5, dtype=np.float64))]
    level = PFSLevel(ramfs / "global", "exec", [0])
    info = level.write(1, 0, arrays, level=4, nranks=1)
    verify_file(level.path(1, 0), expect_digest=info.digest)
    assert np.array_equal(read_arrays(level.path(1, 0))["u"], arrays[0][1])


def test_on_a_tmpfs_the_bytes_are_right_whichever_way_the_kernel_takes(small_disk):
    # Older kernels refuse O_DIRECT on tmpfs (EINVAL), recent ones take it: the writer follows this kernel.
    tmpfs = small_disk(4 * DIRECT_CHUNK)
    try:
        os.close(os.open(tmpfs / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600))
        takes_direct = True
    except OSError:
        takes_direct = False
    data = os.urandom(DIRECT_CHUNK + 4097)
    w = _write_like_a_checkpoint(tmpfs / "f.bin", data, 200, 1 << 20, direct=True)
    assert w.direct is takes_direct
    assert (tmpfs / "f.bin").read_bytes() == data


def test_a_large_first_write_is_streamed_not_kept_whole(tmp_path):
    # The head kept for rewriting is the first write's pages up to one staging buffer, never a file's copy.
    data = os.urandom(3 * DIRECT_CHUNK + 5)
    w = AtomicWriter(tmp_path / "f.bin", direct=True)
    w.pwrite(data, 0)
    assert w._direct is not None and len(w._direct._head) == DIRECT_CHUNK
    w.pwrite(b"new", 1)                                     # a rewrite inside the kept head
    w.commit()
    assert (tmp_path / "f.bin").read_bytes() == data[:1] + b"new" + data[4:]


def test_a_full_disk_during_a_direct_write_is_a_storage_error_and_keeps_the_previous_file(small_disk):
    disk = small_disk(DIRECT_MIN_BYTES + 6 * DIRECT_CHUNK)           # room for one file, not for two
    level = PFSLevel(disk / "global", "exec", [0])
    arrays = [("u", np.arange(DIRECT_MIN_BYTES // 8 + 99, dtype=np.float64))]
    first = level.write(1, 0, arrays, level=4, nranks=1)
    path = level.path(1, 0)
    before = path.read_bytes()
    arrays[0][1][:] += 1.0
    with pytest.raises(StorageError, match="No space left"):
        level.write(1, 0, arrays, level=4, nranks=1)               # the same name: replaces it if it can
    assert path.read_bytes() == before
    verify_file(path, expect_digest=first.digest)
    assert os.listdir(path.parent) == [path.name]                   # the partial temporary file is gone


def test_the_post_processing_l4_copy_of_a_large_file_is_written_direct(tmp_path):
    # inline_l4 = 0: the L1 file is copied into L4 after the call (a thread: PFSLevel.put_file; a head:
    # pfs_work). Both go through the direct writer for a large file; a small one stays buffered.
    n = DIRECT_MIN_BYTES // 8 + 4321                       # just over the threshold, not page-aligned
    arrays = [("u", np.arange(n, dtype=np.float64) * 0.25), ("step", np.array([3], np.int64))]
    src = tmp_path / "l1.ftk"
    info = write_file(src, arrays, rank=0, level=4, ckpt_id=5, exec_id="exec", nranks=1)
    level = PFSLevel(tmp_path / "global", "exec", [0])
    assert level.put_file(5, 0, src) == os.path.getsize(src)
    head_dst = tmp_path / "head" / "rank0.ftk"
    pfs_work({"src": str(src), "dst": str(head_dst), "chunk": 1 << 20, "rank": 0, "id": 5}, None)
    for path in (level.path(5, 0), head_dst):
        assert _cached_fraction(path) < 0.01, path            # bypassed the page cache
        assert path.read_bytes() == src.read_bytes()
        verify_file(path, expect_digest=info.digest)
    small = tmp_path / "small.ftk"
    write_file(small, [("u", np.arange(1000.0))], rank=1, level=4, ckpt_id=5, exec_id="exec", nranks=2)
    level.put_file(5, 1, small)
    assert _cached_fraction(level.path(5, 1)) > 0.5          # below the threshold: buffered, as before
