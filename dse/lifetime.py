"""A child process that dies with the process that started it, however that one ends:
mpiexec (:mod:`dse.runtime.launch.mpiexec`), the model's kernel compiling ahead
(:mod:`models_analytical.ahead`).

mpiexec runs in a session of its own (so that Ctrl-C at the terminal reaches the launching
process first, which then stops every rank: :func:`dse.runtime.launch.mpiexec.kill_session`). A
launching process killed outright (SIGKILL, the OOM killer) or by a closed terminal runs no
cleanup at all, and mpiexec and its ranks went on running. :func:`die_with_parent` is a
``preexec_fn`` that asks Linux to send the child SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``; kept across ``exec``, not passed on to the child's own children).
mpiexec (Open MPI's ``prterun``) stops its ranks on SIGTERM, and Open MPI's daemons on other
hosts or boards stop theirs when they lose mpiexec.

"Its parent" is the thread that started the child: start it from a thread that waits for it or
lives as long as the process (as every caller here does). Outside Linux nothing is set (the
caller's own cleanup then is all there is).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

#: prctl(2) option: the signal the calling process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: What mpiexec gets: it stops its ranks on SIGTERM (SIGKILL would leave that to its daemons).
SIGNAL = signal.SIGTERM
#: Exit status of a child whose parent died before it could be tied to it.
ORPHANED = 129


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl


#: Loaded once, here: a preexec_fn runs between fork and exec, where loading a library is unsafe.
_PRCTL = _prctl()


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets :data:`SIGNAL` when the
    calling process dies; a child whose parent is already gone exits at once."""
    parent = os.getpid()

    def tie() -> None:
        if _PRCTL is None:
            return
        _PRCTL(PR_SET_PDEATHSIG, int(SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: nobody will ask
            os._exit(ORPHANED)

    return tie
