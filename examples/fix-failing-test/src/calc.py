"""A tiny calculator with a bug for the example to fix."""


def add(a, b):
    return a - b


def double(x):
    return 2 * x
