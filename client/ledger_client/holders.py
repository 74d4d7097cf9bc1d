"""Whose lease is it: this process's default owner label, and whether the process a lease
names is gone, so that a resumed run does not wait out its own dead predecessor's lease.

A process that is not given an `owner` claims as `<host>:<pid>:<pid namespace>` (the
namespace's number where the system has one, as Linux does). A guarded call met again after a
crash finds its effect `dispatching` under such a label; if the label names this host and this
process's PID namespace, and no process with that PID is alive, the holder is provably gone:
the guard asks the ledger to end its lease now (`Ledger.end_lease`), and recovery takes the
effect up at once instead of when the lease would have run out.

Anything less certain waits the lease out, as a lease of another worker is waited out: another
host's label, a label given by the application (nothing says one name is held by one process
at a time), another PID namespace (a container beside this one on the host's network shares
its host name but not its PIDs), a PID that is alive again (reused, or a zombie not yet
reaped) and this process's own PID. Ending a live holder's lease early would be wrong: its
call could still reach the provider after the ledger took the absence of a record as proof.
"""

from __future__ import annotations

import os
import socket


def _pid_namespace() -> str:
    """The number of this process's PID namespace ("" where there is none to read)."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    return link.partition("[")[2].rstrip("]")


def process_owner() -> str:
    """This process's owner label when none is given."""
    namespace = _pid_namespace()
    label = f"{socket.gethostname()}:{os.getpid()}"
    return f"{label}:{namespace}" if namespace else label


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def holder_gone(lease_owner: str) -> bool:
    """Is the process `lease_owner` names (a default label, `process_owner`) certainly gone?"""
    parts, mine = lease_owner.split(":"), process_owner().split(":")
    if len(parts) != len(mine) or parts[0] != mine[0] or parts[2:] != mine[2:]:
        return False
    pid = parts[1]
    if not pid.isdigit():
        return False
    if int(pid) == os.getpid() or int(pid) <= 1:
        return False
    return not _alive(int(pid))
