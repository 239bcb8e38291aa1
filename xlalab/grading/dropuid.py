"""The privilege drop: the jail's first process when the grader runs as root (run by path with ``python -I``,
standard library only; :func:`xlalab.grading.sandbox.command` puts it first).

bwrap runs as root without a user namespace and keeps only CAP_SETUID and CAP_SETGID; this program becomes the
jail's own unprivileged uid (no groups, no capabilities left, no new privileges) and then execs the command.

argv: the uid, then the command (an absolute path and its arguments).
"""

import ctypes
import os
import sys

PR_SET_NO_NEW_PRIVS = 38


def main(argv: list[str]) -> None:
    uid = int(argv[0])
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    ctypes.CDLL(None).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if os.getuid() != uid or os.geteuid() != uid or os.getgroups():
        sys.exit("xlalab sandbox: could not drop to the jail user")
    os.execv(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
