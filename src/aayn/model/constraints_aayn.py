"""Lexically constrained decoding: target phrases every output must contain (a glossary's terms), by dynamic beam
allocation (Post & Vilar 2018; the vectorized form of Hu et al. 2019 that fairseq implements as
`LexicallyConstrainedBeamSearch`).

Each hypothesis keeps a state saying how many constraint tokens it has produced (its "bank"). At each step the
candidates are the 2k best extensions by log P, each live beam's best extension, and each live beam's extensions
by a token that advances its constraints; the k beams are then shared across banks round-robin (the best of the
fullest bank, the best of the next, ... then the second best of each), so that hypotheses that met more
constraints are kept even when they score lower. A hypothesis may end (eos) only once it has met all its
constraints (as in fairseq); at the length limit, where §6.1's search makes eos the only choice, one that has not
is dropped. The refusal of phrases longer than the limit leaves room for one that has: the fullest bank always
keeps a beam, and its next constraint token is always a candidate. Only where token rules (`bad_words_ids`,
`no_repeat_ngram_size`) forbid a phrase can a sentence end with no hypothesis: an empty output scored -inf.

Unordered constraints (the default) follow fairseq's trie of phrases (`UnorderedConstraintState`): a phrase
abandoned half-way gives back its tokens, and a phrase given twice must appear twice. Ordered constraints must
appear in the order given, with anything between phrases; a phrase abandoned half-way starts again (fairseq's
`OrderedConstraintState` restarts from the first phrase, losing those already met; here the phrases met stay met).

This file travels with every saved checkpoint (the search imports it): it imports only torch.
"""

from __future__ import annotations

import math
from collections import Counter

import torch


class _Node:
    """A node of the trie of unordered phrases: `terminal` phrases end here, `count` phrases pass through or end."""

    __slots__ = ("children", "count", "parent", "terminal", "token")

    def __init__(self, token: int | None = None, parent: _Node | None = None):
        self.token, self.parent, self.children, self.terminal, self.count = token, parent, {}, 0, 0


class UnorderedState:
    """Progress of one hypothesis through unordered phrases (immutable: `advance` returns a new state)."""

    __slots__ = ("completed", "generated", "node", "root")

    def __init__(self, root: _Node, node: _Node, completed: Counter, generated: Counter):
        self.root, self.node, self.completed, self.generated = root, node, completed, generated

    @classmethod
    def start(cls, phrases: list[list[int]]) -> UnorderedState:
        root = _Node()
        for phrase in phrases:
            node = root
            node.count += 1
            for token in phrase:
                node = node.children.setdefault(token, _Node(token, node))
                node.count += 1
            node.terminal += 1
        return cls(root, root, Counter(), Counter())

    @property
    def bank(self) -> int:
        return sum(self.generated.values())

    @property
    def met(self) -> bool:
        node = self.node
        in_final = node.terminal and self.completed[node] < node.terminal
        return sum(self.completed.values()) + bool(in_final) == self.root.count

    def next_tokens(self) -> set[int]:
        tokens = set(self.root.children)
        return tokens if self.node is self.root else tokens | set(self.node.children)

    def _moved(self, node: _Node, rewind: bool) -> UnorderedState:
        completed, generated = Counter(self.completed), Counter(self.generated)
        if rewind:  # off the trie: a phrase that ends on the way back is met, the others give back their tokens
            back = self.node
            while back is not self.root:
                if back.terminal and self.completed[back] < back.terminal:
                    completed[back] += 1
                    break
                generated[back] -= 1
                back = back.parent
        if node is not self.root:
            generated[node] += 1
        return UnorderedState(self.root, node, completed, generated)

    def advance(self, token: int) -> UnorderedState:
        child = self.node.children.get(token)
        if child is not None and self.generated[child] < child.count:
            return self._moved(child, rewind=False)
        child = self.root.children.get(token)
        if child is not None and self.generated[child] < child.count:
            return self._moved(child, rewind=True)
        return self._moved(self.root, rewind=True)


class OrderedState:
    """Progress of one hypothesis through phrases in a given order: `done` tokens of their concatenation."""

    __slots__ = ("done", "ends", "tokens")

    def __init__(self, tokens: tuple[int, ...], ends: frozenset[int], done: int):
        self.tokens, self.ends, self.done = tokens, ends, done

    @classmethod
    def start(cls, phrases: list[list[int]]) -> OrderedState:
        ends, total = set(), 0
        for phrase in phrases:
            total += len(phrase)
            ends.add(total)
        return cls(tuple(token for phrase in phrases for token in phrase), frozenset(ends | {0}), 0)

    @property
    def bank(self) -> int:
        return self.done

    @property
    def met(self) -> bool:
        return self.done == len(self.tokens)

    def _phrase_start(self) -> int:
        return max(end for end in self.ends if end <= self.done)

    def next_tokens(self) -> set[int]:
        if self.met:
            return set()
        return {self.tokens[self.done], self.tokens[self._phrase_start()]}

    def advance(self, token: int) -> OrderedState:
        if self.met:
            return self
        if self.tokens[self.done] == token:
            return OrderedState(self.tokens, self.ends, self.done + 1)
        start = self._phrase_start()
        if start == self.done:  # between phrases: anything may come
            return self
        return OrderedState(self.tokens, self.ends, start + (self.tokens[start] == token))


class ConstrainedSearch:
    """The constraint states of the hypotheses still searched (n sentences of k beams), and the constrained form of
    `BeamSearch.step`. `sentence_phrases[i]` lists sentence i's phrases (token lists); a sentence without any is
    searched as plain beam search (up to the order of candidates of equal score)."""

    def __init__(self, sentence_phrases: list[list[list[int]]], num_beams: int, ordered: bool = False):
        kind = OrderedState if ordered else UnorderedState
        self.k = num_beams
        self.states = [[kind.start(phrases)] * num_beams for phrases in sentence_phrases]
        self.advanced: list[dict] = []  # per sentence, the states of the step's candidates: (beam, word) -> state

    def ban_unmet_eos(self, log_probs: torch.Tensor, eos: int) -> torch.Tensor:
        """log_probs (n, k, vocab): eos is banned for hypotheses that have not met their constraints (at their
        sentence's limit, where eos is the only choice, they have none left and end there unfinished)."""
        unmet = torch.tensor([[not state.met for state in beams] for beams in self.states], device=log_probs.device)
        log_probs[:, :, eos] = log_probs[:, :, eos].masked_fill(unmet, -math.inf)
        return log_probs

    def step(self, scores: torch.Tensor, log_probs: torch.Tensor):
        """As `BeamSearch.step` (scores (n, k), log_probs (n, k, vocab) -> 2k candidates' values, beams and words,
        each (n, 2k), -inf where fewer exist), the candidates chosen and ordered by dynamic beam allocation."""
        n, k, vocab = log_probs.shape
        totals = scores[:, :, None] + log_probs  # (n, k, vocab)
        values, indices = totals.view(n, k * vocab).topk(2 * k, dim=-1)
        best_values, best_words = totals.max(dim=-1)  # (n, k): each beam's best extension
        host = [t.tolist() for t in (values, indices // vocab, indices % vocab, best_values, best_words)]
        wanted = [[sorted(state.next_tokens()) for state in beams] for beams in self.states]
        rows = [(i, beam, word) for i in range(n) for beam in range(k) for word in wanted[i][beam]]
        wanted_values = totals[[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]].tolist()
        extra = [[] for _ in range(n)]
        for (i, beam, word), value in zip(rows, wanted_values):
            extra[i].append((value, beam, word))
        out = torch.full((3, n, 2 * k), -math.inf, dtype=torch.float64)
        self.advanced = [{} for _ in range(n)]
        for i in range(n):
            candidates = list(zip(host[0][i], host[1][i], host[2][i]))
            candidates += [(v, beam, w) for beam, (v, w) in enumerate(zip(host[3][i], host[4][i]))] + extra[i]
            chosen = self._allocate(self.states[i], candidates, 2 * k, self.advanced[i])
            for slot, (value, beam, word) in enumerate(chosen):
                out[0, i, slot], out[1, i, slot], out[2, i, slot] = value, beam, word
        beams = out[1].nan_to_num(0.0, 0.0, 0.0).long().to(scores.device)
        words = out[2].nan_to_num(0.0, 0.0, 0.0).long().to(scores.device)
        return out[0].to(scores.device, scores.dtype), beams, words

    @staticmethod
    def _allocate(states: list, candidates: list[tuple[float, int, int]], size: int, advanced: dict) -> list:
        """The `size` candidates (value, beam, word) a sentence keeps, in allocation order: unique, finite ones, by
        bank (most constraint tokens first) and score, then taken round-robin across banks. `advanced` receives
        each candidate's state, (beam, word) -> state, for `live_on`."""
        banks = {}
        for value, beam, word in sorted(candidates, key=lambda c: -c[0]):
            if math.isfinite(value) and (beam, word) not in advanced:
                advanced[beam, word] = state = states[beam].advance(word)
                banks.setdefault(state.bank, []).append((value, beam, word))
        order = sorted(banks, reverse=True)
        chosen, rank = [], 0
        while len(chosen) < size and any(rank < len(banks[bank]) for bank in order):
            chosen += [banks[bank][rank] for bank in order if rank < len(banks[bank])]
            rank += 1
        return chosen[:size]

    def live_on(self, beams: torch.Tensor, words: torch.Tensor) -> None:
        """The new live beams (n, k) continue `beams` with `words`: their states advance."""
        for i, (parents, tokens) in enumerate(zip(beams.tolist(), words.tolist())):
            known, states = self.advanced[i] if i < len(self.advanced) else {}, self.states[i]
            moved = [known.get((beam, word)) for beam, word in zip(parents, tokens)]
            self.states[i] = [state if state is not None else states[beam].advance(word)
                              for state, beam, word in zip(moved, parents, tokens)]  # fmt: skip

    def keep(self, sentences: list[int]) -> None:
        self.states = [self.states[i] for i in sentences]
