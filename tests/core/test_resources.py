"""A server takes the file descriptors the system allows (issue 21, item 3)."""

from __future__ import annotations

import resource
from pathlib import Path

from magnetar.testing.server import StandaloneProcess


def test_the_standalone_raises_its_open_file_limit_to_the_hard_limit(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # What a default shell hands a server: a low soft limit, which the child inherits.
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
    try:
        with StandaloneProcess(tmp_path / "data") as server:
            assert server.proc is not None
            limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    [line] = [x for x in limits.splitlines() if x.startswith("Max open files")]
    want = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    assert line.split()[3:5] == [want, want], line
