"""Job functions for rq_proxy.py: rq's worker imports them by their dotted name (`rq_jobs.add`),
so they live in a module of their own, importable from tests/clients/ (the script's directory)."""


def add(a, b):
    return a + b


def fail_on_purpose(msg):
    raise RuntimeError(msg)
