"""Child Python processes for tests: start one, wait for a line it prints, kill it.

Crash tests need a real process to SIGKILL: nothing in it gets to flush, close or
checkpoint, exactly as in a crash (except that the kernel keeps the page cache, so what
the child wrote without fsync is still there). The parent waits for readiness on a line
the child prints, never on a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import magnetar

REPO_ROOT = Path(magnetar.__file__).resolve().parent.parent
STDERR_TAIL = 4000  # characters of a failed child's stderr worth quoting


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH``, so a
    child imports the same ``magnetar`` (and ``tests``) whether or not it is installed."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


class ChildFailed(AssertionError):
    """The child did not do what the test waited for; the message quotes its stderr."""


class PythonChild:
    """A running ``python -m MODULE ARGS...``: stdout is a pipe of lines, stderr a file.

    Use ``async with`` (or :meth:`kill`) so the child never outlives the test.
    """

    def __init__(self, proc: asyncio.subprocess.Process, module: str, stderr_path: Path) -> None:
        self._proc = proc
        self.module = module
        self.stderr_path = stderr_path

    @classmethod
    async def start(
        cls,
        module: str,
        *args: str,
        stderr_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PythonChild:
        """Start the child with this interpreter; its stderr goes to ``stderr_path``.

        stderr goes to a file rather than a pipe so a chatty child can never block on a
        pipe nobody reads.
        """
        with stderr_path.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                module,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=python_env(env),
                cwd=REPO_ROOT,
            )
        return cls(proc, module, stderr_path)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """None while the child runs; negative for the signal that ended it."""
        return self._proc.returncode

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def failure(self, problem: str) -> ChildFailed:
        """An error saying what went wrong, with the child's exit code and stderr tail."""
        return ChildFailed(
            f"child {self.module} (pid {self.pid}) {problem}; exit code {self.returncode}; "
            f"stderr:\n{self.stderr()[-STDERR_TAIL:]}"
        )

    async def wait_for_line(self, expected: str, *, timeout: float) -> None:
        """Read stdout lines until one equals ``expected``.

        Raises ChildFailed if the child closes stdout (exits) first or ``timeout`` seconds
        pass; other lines before it are skipped.
        """
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await stdout.readline()
                    if not line:
                        await self._proc.wait()
                        raise self.failure(f"exited before printing {expected!r}")
                    if line.decode(errors="replace").rstrip("\r\n") == expected:
                        return
        except TimeoutError:
            raise self.failure(f"printed no {expected!r} line within {timeout} s") from None

    async def kill(self) -> int:
        """SIGKILL the child unless it already exited, reap it, and return its exit code
        (``-signal.SIGKILL`` if the kill is what ended it)."""
        if self._proc.returncode is None:
            # It may exit between the check and the kill; communicate() reaps it either way.
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        # communicate() reads stdout to its end too, so the pipe transport is closed.
        await self._proc.communicate()
        assert self._proc.returncode is not None
        return self._proc.returncode

    async def __aenter__(self) -> PythonChild:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.kill()


__all__ = ["REPO_ROOT", "ChildFailed", "PythonChild", "python_env"]
