"""Files the demo scripts (record_demo_sessions.py, screenshots.py) edit with the bundled model."""

# a small module strata-tiny edits right (add_import is its best kind on held-out files)
ARITH = '''"""Small arithmetic helpers."""
import os


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
