"""Shared by the Python client scripts (redis_py_proxy.py, django_cache_proxy.py,
rq_proxy.py), like common.js for the Node ones: assertions that exit 1 with a clear message,
an uncaught exception reported the same way, and the whole-run watchdog."""

import signal
import sys
import traceback


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def _on_exception(kind, value, tb):
    traceback.print_exception(kind, value, tb)
    print(f"FAIL: {kind.__name__}: {value}", flush=True)
    sys.exit(1)


def watchdog(seconds):
    """Any uncaught exception fails the run; SIGALRM ends it after `seconds`."""

    def on_alarm(_sig, _frame):
        fail(f"timeout: the whole run took more than {seconds} s")

    sys.excepthook = _on_exception
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
