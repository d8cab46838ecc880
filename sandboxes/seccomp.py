"""The sandbox's system-call filter: what no test needs is refused, compiled once by libseccomp.

bubblewrap loads the compiled program (``--seccomp FD``) into the sandbox's first process before it
runs anything of ours; every process of the sandbox inherits it and none can lift it (no_new_privs).
The default is to allow: a filter listing every syscall a test suite may make would break suites for
little gain, while the calls below are the kernel's attack surface or reach outside the sandbox.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

# Refused with EPERM: tracing or reading other processes, mounting, the kernel's keyrings, BPF,
# performance counters, kernel and module loading, userfaultfd (a race amplifier in exploits), new
# namespaces (a user namespace would hand a test capabilities again), io_uring (its own syscall
# surface), and the host's clock, swap, accounting and reboot.
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",  # (another process's descriptor: bwrap's init holds the exit status's eventfd)
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "quotactl",
    "syslog",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "fanotify_init",
)
_CLONE_NEWUSER = 0x10000000


@functools.cache
def program() -> bytes | str:
    """The compiled filter (BPF), or a one-line reason it cannot be built here."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as exc:  # the bindings, or libseccomp itself, are missing
        return f"libseccomp is not available ({exc}); install libseccomp2 and the pyseccomp package"
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in DENIED:
            try:
                rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except (ValueError, OSError, RuntimeError):  # not a syscall on this architecture
                continue
        # clone with CLONE_NEWUSER (unshare is refused above); clone3 passes its flags in memory a
        # filter cannot read, so it is refused as unknown and the C library falls back to clone.
        rules.add_rule(
            seccomp.ERRNO(errno.EPERM),
            "clone",
            seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER),
        )
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as out:
            rules.export_bpf(out)
            out.seek(0)
            return out.read()
    except Exception as exc:  # (libseccomp reports failures as assorted exceptions)
        return f"the seccomp filter could not be built: {exc}"


def program_fd() -> int:
    """A fresh, inheritable descriptor from which bwrap reads the program (each bwrap reads its own
    to the end). The caller closes it once the command has started."""
    compiled = program()
    if isinstance(compiled, str):
        raise RuntimeError(compiled)
    fd = os.memfd_create("ralph-seccomp", os.MFD_CLOEXEC)  # (pass_fds hands it to bwrap alone)
    try:
        os.write(fd, compiled)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
