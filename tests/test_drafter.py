"""Drafters against brute-force references of the same rules (the design's drafting rules, docs/decoding.md)."""
from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

E = pytest.importorskip("strata._engine")

CANDIDATES = 4
MAX_BACKWARD = 512
MAX_ORDER = 24


def ref_baseline(seq, max_tokens, min_match, cap=3):
    """The 4 most recent earlier ends of the last trigram; longest backward match, then most
    recent; at least max(min_match, 3) tokens; the tokens that followed, at most `cap`."""
    n = len(seq)
    want = min(max_tokens, cap)
    if n < 4 or want <= 0:
        return [], 0
    tri = seq[n - 3:]
    ends = [p for p in range(2, n - 1) if seq[p - 2:p + 1] == tri][-CANDIDATES:]
    best_p, best_len = -1, 0
    for p in reversed(ends):
        length = 0
        while length < MAX_BACKWARD and p - length >= 0 and seq[p - length] == seq[n - 1 - length]:
            length += 1
        if length > best_len:
            best_p, best_len = p, length
    if best_p < 0 or best_len < max(min_match, 3):
        return [], 0
    return seq[best_p + 1:best_p + 1 + want], best_len


def ref_suffix(docs, live, max_tokens, min_match):
    """Continuation counts of every context of 1..24 tokens (documents in order, then the live
    sequence); walk the deepest context with a continuation, most frequent then most recent."""
    counts = defaultdict(lambda: defaultdict(int))
    last = defaultdict(dict)
    clock = 0
    for seq in [*docs, live]:
        for e in range(len(seq) - 1):
            for order in range(1, min(MAX_ORDER, e + 1) + 1):
                ctx = tuple(seq[e + 1 - order:e + 1])
                counts[ctx][seq[e + 1]] += 1
                clock += 1
                last[ctx][seq[e + 1]] = clock
    want = min(max_tokens, 15)
    ext = list(live)
    out, match_len = [], 0
    for k in range(want):
        found = None
        for order in range(min(MAX_ORDER, len(ext)), max(min_match, 1) - 1, -1):
            ctx = tuple(ext[len(ext) - order:])
            if ctx in counts:
                found = order, ctx
                break
        if found is None:
            break
        order, ctx = found
        tok = max(counts[ctx], key=lambda t: (counts[ctx][t], last[ctx][t]))
        if k == 0:
            match_len = order
        out.append(tok)
        ext.append(tok)
    return out, match_len


def feed(drafter, seq, chunks):
    i = 0
    for c in chunks:
        drafter.append(seq[i:i + c])
        i += c
    drafter.append(seq[i:])


small_seqs = st.lists(st.integers(0, 3), min_size=0, max_size=160)
chunking = st.lists(st.integers(1, 7), max_size=10)


@settings(max_examples=200, deadline=None)
@given(seq=small_seqs, chunks=chunking, max_tokens=st.integers(0, 6), min_match=st.integers(1, 8))
def test_baseline_matches_reference(seq, chunks, max_tokens, min_match):
    d = E.BaselineDrafter()
    feed(d, seq, chunks)
    assert d.tokens == seq
    assert d.propose(max_tokens, min_match) == tuple(ref_baseline(seq, max_tokens, min_match))


@settings(max_examples=100, deadline=None)
@given(seq=st.lists(st.integers(0, 2), max_size=300), max_tokens=st.integers(1, 16), cap=st.integers(1, 16))
def test_baseline_cap_matches_reference(seq, max_tokens, cap):
    d = E.BaselineDrafter(cap)
    d.append(seq)
    assert d.propose(max_tokens, 4) == tuple(ref_baseline(seq, max_tokens, 4, cap))


@settings(max_examples=150, deadline=None)
@given(seq=small_seqs, docs=st.lists(st.lists(st.integers(0, 3), max_size=40), max_size=3),
       chunks=chunking, max_tokens=st.integers(0, 16), min_match=st.integers(1, 6))
def test_suffix_matches_reference(seq, docs, chunks, max_tokens, min_match):
    d = E.SuffixDrafter()
    for doc in docs:
        d.add_document(doc)
    feed(d, seq, chunks)
    assert d.propose(max_tokens, min_match) == tuple(ref_suffix(docs, seq, max_tokens, min_match))


def test_suffix_follows_most_frequent_continuation():
    d = E.SuffixDrafter()
    # after "1 2" came 3 twice and 4 once (most recently): frequency wins
    d.append([1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 4, 7, 1, 2])
    tokens, match_len = d.propose(1, 2)
    assert tokens == [3] and match_len == 2


def test_long_copy_drafts_fifteen_tokens():
    text = list(range(100, 160))
    for drafter in (E.SuffixDrafter(), E.BaselineDrafter(cap=15)):
        drafter.append(text + text[:10])
        tokens, match_len = drafter.propose(15, 4)
        assert tokens == text[10:25], drafter.kind
        assert match_len >= 10
    base = E.BaselineDrafter()
    base.append(text + text[:10])
    assert base.propose(15, 4)[0] == text[10:13]  # the baseline rule stops at 3


def test_documents_feed_the_suffix_drafter_only_within_themselves():
    d = E.SuffixDrafter()
    d.add_document([5, 6, 7, 8, 9])
    d.add_document([1, 2])
    d.append([6, 7, 8])
    assert d.propose(3, 3) == ([9], 3)
    d2 = E.SuffixDrafter()
    d2.add_document([5, 6])
    d2.add_document([7, 8])
    d2.append([6])
    assert d2.propose(3, 1) == ([], 0)  # 6 -> 7 would span two documents


def test_no_match_below_min_match():
    d = E.BaselineDrafter()
    d.append([1, 2, 3, 4, 0, 2, 3, 4])
    assert d.propose(3, 4) == ([], 0)
    assert d.propose(3, 3) == ([0, 2, 3], 3)
