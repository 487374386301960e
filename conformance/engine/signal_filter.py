"""A kernel filter in the backend's worker that stops signals aimed at the run's process, however they are
sent: os.kill is wrapped in Python (runner_guard.py), but libc's kill() through ctypes, or a `kill`
command the backend starts, makes the system call itself.

Linux only (x86_64, aarch64): a seccomp filter (prctl PR_SET_SECCOMP, SECCOMP_MODE_FILTER; Linux
Documentation/userspace-api/seccomp_filter.rst), installed in the worker before the backend is loaded and
inherited by every process the backend starts. It traps `kill`, `tkill`, `tgkill`, `rt_sigqueueinfo` and
`rt_tgsigqueueinfo` whose target is the run's pid, its process group (as a negative pid), every process
(-1) or, where the worker shares the run's group, the caller's own group (0), with any signal but 0 (which
only asks whether a process exists), and `pidfd_open` of the run's pid (`pidfd_send_signal` needs one).
A trapped call is not made: the kernel sends SIGSYS to the thread that tried instead. In the worker's own
process a handler notes it (RunnerGuard names the backend, as for os.kill); a process the backend started
(a `kill` command) has no such handler and ends with SIGSYS, so the signal is stopped but the backend is
not named. Not covered: 32-bit (i386, x32) system calls, a thread id of the run other than its pid given
to `tkill`, and a platform where the filter cannot be installed (then `install` says why, and os.kill's
wrapper is the only guard).
"""
from __future__ import annotations

import ctypes
import os
import platform
import signal
import sys

#: AUDIT_ARCH value (linux/audit.h) and the syscall numbers of (kill, tkill, tgkill, rt_sigqueueinfo,
#: rt_tgsigqueueinfo, pidfd_open) per machine (arch/x86/entry/syscalls/syscall_64.tbl;
#: include/uapi/asm-generic/unistd.h for aarch64)
ARCHES = {"x86_64": (0xC000003E, (62, 200, 234, 129, 297, 434)),
          "aarch64": (0xC00000B7, (129, 130, 131, 138, 240, 434))}
#: which argument holds the signal, per syscall above (None: pidfd_open has none)
SIGNAL_ARGUMENT = (1, 1, 2, 1, 2, None)

_LD_ABS_W, _JEQ_K, _RET_K = 0x20, 0x15, 0x06           # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
_RET_ALLOW, _RET_TRAP = 0x7FFF0000, 0x00030000         # SECCOMP_RET_ALLOW, SECCOMP_RET_TRAP
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


class _Instruction(ctypes.Structure):   # struct sock_filter
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):       # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def program(runner: int, runner_group: int | None, same_group: bool, arch: int, numbers) -> list[tuple]:
    """The filter as (code, jt, jf, k) instructions. seccomp_data: nr at 0, arch at 4, args[i]'s low 32
    bits at 16 + 8 i (little-endian); a pid_t argument is compared as its 32-bit pattern."""
    targets = [runner, 0xFFFFFFFF] + ([(-runner_group) & 0xFFFFFFFF] if runner_group else []) \
        + ([0] if same_group else [])
    code: list = []   # (code, jt label or offset, jf label or offset, k); labels resolved below
    code += [(_LD_ABS_W, 0, 0, 4), (_JEQ_K, 0, "allow", arch), (_LD_ABS_W, 0, 0, 0)]
    for i, nr in enumerate(numbers):
        code.append((_JEQ_K, f"call{i}", 0, nr))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    for i, sig_arg in enumerate(SIGNAL_ARGUMENT):
        code.append(("label", f"call{i}"))
        if sig_arg is not None:
            code += [(_LD_ABS_W, 0, 0, 16 + 8 * sig_arg), (_JEQ_K, "allow", 0, 0)]
        code.append((_LD_ABS_W, 0, 0, 16))
        code += [(_JEQ_K, "trap", 0, target) for target in targets]
        code.append((_RET_K, 0, 0, _RET_ALLOW))
    code += [("label", "allow"), (_RET_K, 0, 0, _RET_ALLOW), ("label", "trap"), (_RET_K, 0, 0, _RET_TRAP)]
    where, at = {}, 0
    for ins in code:
        if ins[0] == "label":
            where[ins[1]] = at
        else:
            at += 1
    out, at = [], 0
    for ins in code:
        if ins[0] == "label":
            continue
        jt, jf = (where[j] - at - 1 if isinstance(j, str) else j for j in ins[1:3])
        out.append((ins[0], jt, jf, ins[3]))
        at += 1
    return out


def install(runner: int, on_trap) -> str | None:
    """Install the filter for this process and its future children; `on_trap()` is called (in Python's
    signal handler) when this process tried to signal the run. None when installed, else why not."""
    machine = platform.machine()
    if not sys.platform.startswith("linux") or machine not in ARCHES:
        return f"no seccomp filter on {sys.platform} {machine}"
    try:
        group = os.getpgid(runner)
    except OSError:
        group = None
    arch, numbers = ARCHES[machine]
    instructions = program(runner, group, group is not None and os.getpgrp() == group, arch, numbers)
    array = (_Instruction * len(instructions))(*(_Instruction(*ins) for ins in instructions))
    prog = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    signal.signal(signal.SIGSYS, lambda signum, frame: on_trap())
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        signal.signal(signal.SIGSYS, signal.SIG_DFL)
        return f"prctl(PR_SET_SECCOMP) failed: {os.strerror(ctypes.get_errno())}"
    return None
