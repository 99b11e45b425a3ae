"""An idle process gives its clean file-backed pages back (``_pages``), and the idle release signals Spark's daemon
only once it can take the signal (``idle_release._catches``)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from jupyter_torchdist.launchers.session.daemon import _file_ranges
from jupyter_torchdist.launchers.session.idle_release import _catches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_PAGEOUT) is Linux's")


def test_file_backed_pages_a_process_alone_maps_are_given_back(tmp_path):
    data = tmp_path / "lib.bin"
    data.write_bytes(os.urandom(32 << 20))
    code = textwrap.dedent(f"""
        import mmap
        from jupyter_torchdist.launchers.session.daemon import give_back_file_pages
        def rss_file():
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssFile:"))
        with open({str(data)!r}, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        sum(m[i] for i in range(0, len(m), 4096))  # every page read in, as a library's are once used
        before = rss_file()
        assert give_back_file_pages() > 0
        print(before, rss_file())
    """)
    before, after = map(int, subprocess.check_output([sys.executable, "-c", code], text=True).split())
    assert before - after > 24 << 10, (before, after)  # KB: most of the 32 MB went


def test_only_mappings_of_files_are_advised():
    maps = ["7f00-7f10 r-xp 00000000 fd:01 42 /usr/lib/libtorch.so\n",
            "7f10-7f20 rw-p 00000000 00:00 0 \n",
            "7f20-7f30 rw-p 00000000 00:00 0 [heap]\n",
            "7f30-7f40 r--p 00000000 fd:01 43 /tmp/gone.so (deleted)\n"]
    assert _file_ranges(maps) == [(0x7F00, 0x7F10)]


def test_a_process_is_signalled_only_once_it_handles_the_signal():
    assert not _catches(os.getpid(), signal.SIGUSR2)
    old = signal.signal(signal.SIGUSR2, lambda *_: None)
    try:
        assert _catches(os.getpid(), signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert not _catches(2**22 + 12345, signal.SIGUSR2)  # no such process
