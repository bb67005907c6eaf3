"""The copy bias's predictor in plain Python, for the training machine (which does not build the
engine): the same rule as the engine's `CopyIndex` (engine_ext/drafter.h; docs/decoding.md,
"Copy bias"), checked equal to it in tests/test_copy_bias.py. Over a fixed source, the token that
followed the most recent occurrence of the longest suffix of a context that occurs in the source
with a token after it; a suffix automaton of the source, walked once over the context."""
from __future__ import annotations


class CopyIndex:
    def __init__(self, source):
        self.source = list(source)
        self.length = [0]    # per state: its longest string
        self.link = [-1]     # suffix link
        self.next = [{}]     # transitions
        own = [-1]           # the end position a state was created for (-1: the root, clones)
        last = 0
        for i, c in enumerate(self.source):
            cur = len(self.length)
            self.length.append(self.length[last] + 1)
            self.link.append(-1)
            self.next.append({})
            own.append(i)
            p = last
            while p >= 0 and c not in self.next[p]:
                self.next[p][c] = cur
                p = self.link[p]
            if p < 0:
                self.link[cur] = 0
            else:
                q = self.next[p][c]
                if self.length[p] + 1 == self.length[q]:
                    self.link[cur] = q
                else:
                    clone = len(self.length)
                    self.length.append(self.length[p] + 1)
                    self.link.append(self.link[q])
                    self.next.append(dict(self.next[q]))
                    own.append(-1)
                    while p >= 0 and self.next[p].get(c) == q:
                        self.next[p][c] = clone
                        p = self.link[p]
                    self.link[q] = clone
                    self.link[cur] = clone
            last = cur
        # the last end position of each state's strings with a token after it
        n = len(self.source)
        self.last = [e if 0 <= e < n - 1 else -1 for e in own]
        for s in sorted(range(len(self.length)), key=lambda s: -self.length[s]):
            if self.link[s] >= 0:
                self.last[self.link[s]] = max(self.last[self.link[s]], self.last[s])

    def _advance(self, state: int, token: int) -> int:
        while True:
            t = self.next[state].get(token)
            if t is not None:
                return t
            if state == 0:
                return 0
            state = self.link[state]

    def _predict(self, state: int) -> int:
        while state != 0 and self.last[state] < 0:
            state = self.link[state]
        return -1 if state == 0 else self.source[self.last[state] + 1]

    def predictions(self, context, start: int = 0, skip=()) -> list[int]:
        """The prediction after each prefix context[:k], k = start..len(context); -1 where it is
        in skip (the decoder's copy_skip: the tokens the bias never boosts)."""
        out, state, skip = [], 0, set(skip)
        for k in range(len(context) + 1):
            if k >= start:
                t = self._predict(state)
                out.append(-1 if t in skip else t)
            if k < len(context):
                state = self._advance(state, context[k])
        return out


def special_ids(tokenizer) -> list[int]:
    """What strata's Generator passes as copy_skip: the ids of the session's control tokens."""
    from strata import prompts

    return sorted(i for i in (tokenizer.token_to_id(t) for t in prompts.SPECIAL_TOKENS) if i is not None)
