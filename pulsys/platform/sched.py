"""The reactor thread's CPU scheduling policy (--reactor-sched).

"batch" is Linux's SCHED_BATCH (sched(7)): a fair-class policy, same weight as normal,
whose wake-ups never preempt the task running on the CPU (the kernel's
check_preempt_wakeup_fair returns early for a wakee whose policy is not SCHED_NORMAL);
it runs when that task sleeps or its slice ends. Two reactors sharing a CPU then stop
interrupting each other's batch of completions: with --listeners 2 on one CPU each
worker was preempted ~600 times a second under normal and ~60 under batch, and the CPU a
request fell by about a seventh (docs/benchmarks.md, "--listeners 2 and the scheduler").
The price: against a CPU-bound task of another program on the same CPU, a batch reactor
waits for that task's slice and got ~20% fewer requests through in the same measurement.
A thread may switch itself between SCHED_OTHER and SCHED_BATCH without privilege
(sched_setscheduler(2), since Linux 2.6.39)."""

import os

POLICIES = ("normal", "batch")
_before = None     # the policy of the first thread a reactor changed, before it did


def apply_to_this_thread(policy):
    """Set the calling thread's policy (pid 0 of sched_setscheduler(2) is the calling
    thread, not the process). -> None, or the OSError text where the kernel refused
    (a seccomp profile may): the reactor then runs under the normal policy."""
    global _before
    if policy == "normal":
        return None
    try:
        before = os.sched_getscheduler(0)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError as e:
        return "sched_setscheduler(SCHED_BATCH): %s" % (e.strerror or e)
    if _before is None:
        _before = before
    return None


def not_inherited():
    """For a thread that a reactor thread may start: a new thread inherits its creator's
    policy (sched(7)), and the fill pool starts its threads on demand, on the thread that
    submits (a reactor's). Puts back the policy the process ran under before a reactor
    changed its own: an operator's `chrt --batch pulsys ...` is kept."""
    if _before is not None and _before != os.SCHED_BATCH:
        try:
            os.sched_setscheduler(0, _before, os.sched_param(0))
        except OSError:
            pass
