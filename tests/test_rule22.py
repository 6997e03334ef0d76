"""The LLaDA2.2 Levenshtein rule, worked by hand: the two scans, original-mask bits through the moves, the
schedule, post-steps, the final round, the anti-loop escape, the prompt; then rows == one block at a time."""

import pytest
import torch

from llada import rule
from llada.rule import Candidates, Escape, Levenshtein, PostCount

M, DEL, SPLIT = 90, 91, 92  # mask, DELETE, SPLIT ids (vocab 99 below)
RUNNER, PLAIN = 40, 41  # the runner-up and the plain candidate wherever a test does not care
a, b, c, d = 11, 12, 13, 14


def lev(**kw) -> Levenshtein:
    return Levenshtein(mask_id=M, delete_id=DEL, split_id=SPLIT, **kw)


def cands(token, p, runner_up=None, plain=None) -> Candidates:
    W = len(token)
    return Candidates(torch.tensor(token), torch.tensor(p, dtype=torch.float32),
                      torch.tensor(runner_up or [RUNNER] * W), torch.tensor(plain or [PLAIN] * W))


def book(tokens, original=None, **kw) -> rule.BlockBook:
    """A block's bookkeeping: at entry (every mask original) unless `original` bits are given."""
    start = rule.start_block(torch.tensor(tokens), torch.zeros(len(tokens), dtype=torch.bool), M)
    bits = start.original if original is None else torch.tensor(original)
    return rule.BlockBook(bits, kw.pop("entry_masks", start.entry_masks), **kw)


def step(tokens, cand, bk=None, frozen=0, settings=None, generator=None):
    """One scalar step, checked against the row version on the same block (a batch of one)."""
    tokens = torch.tensor(tokens)
    frozen = torch.arange(len(tokens)) < frozen
    bk = book(tokens.tolist()) if bk is None else bk
    settings = settings or lev()
    alone = rule.levenshtein_step(tokens, cand, frozen, bk, settings, generator)
    books = rule.BlockBooks(bk.original[None], torch.tensor([bk.entry_masks]), torch.tensor([bk.step]),
                            torch.tensor([bk.post]), (bk.seen,))
    gens = None if generator is None else [torch.Generator().set_state(generator.get_state())]
    if generator is not None:  # the scalar call drew from it; the rows' copy draws the same
        gens[0].set_state(_before.get_state())
    rows = rule.levenshtein_rows(tokens[None], Candidates(*(t[None] for t in vars(cand).values())), frozen[None],
                                 books, settings, gens)
    assert_same(rows.row(0), alone)
    return alone


_before = torch.Generator()


def assert_same(x: rule.LevenshteinStep, y: rule.LevenshteinStep) -> None:
    for name in ("tokens", "written", "drafted", "edited", "moved_to"):
        assert torch.equal(getattr(x, name), getattr(y, name)), name
    assert (x.inserts, x.deletes, x.final, x.escaped, x.done) == (y.inserts, y.deletes, y.final, y.escaped, y.done)
    assert torch.equal(x.book.original, y.book.original)
    assert (x.book.entry_masks, x.book.step, x.book.post, x.book.seen) == \
        (y.book.entry_masks, y.book.step, y.book.post, y.book.seen)


def test_delete_drops_its_position_and_a_new_mask_pads_the_block():
    s = step([a, b, c, d], cands([a, DEL, c, d], [0.9] * 4))
    assert s.tokens.tolist() == [a, c, d, M]
    assert s.deletes == (rule.Delete(1, b),) and s.inserts == ()
    assert s.moved_to.tolist() == [0, -1, 1, 2] and s.edited.tolist() == [False, True, False, False]
    assert s.book.original.tolist() == [False] * 4  # the padding mask is new, not original


def test_split_becomes_a_mask_and_the_token_held_before_the_step():
    s = step([a, b, c, d], cands([a, SPLIT, c, d], [0.9] * 4))
    assert s.tokens.tolist() == [a, M, b, c]  # d is pushed past the block's end
    assert s.inserts == (rule.Insert(1, 1, b),) and s.deletes == ()
    assert s.moved_to.tolist() == [0, 2, 3, -1]


def test_original_mask_bits_travel_with_their_tokens():
    # the block entered as four masks; position 0 holds a draft, 1..3 are still masks.
    bk = book([a, M, M, M], original=[True] * 4, entry_masks=4, step=1)
    s = step([a, M, M, M], cands([DEL, b, b, b], [0.9, 0.1, 0.1, 0.1]), bk, settings=lev(steps=4))
    # T2T writes DELETE at 0; the schedule drafts one mask (ties: the leftmost); then everything moves left.
    assert s.written.tolist() == [DEL, b, M, M] and s.drafted.tolist() == [False, True, False, False]
    assert s.tokens.tolist() == [b, M, M, M] and s.book.original.tolist() == [True, True, True, False]
    # SPLIT drafted into an original mask: [new mask, that original mask]; the last original is cut off.
    s = step([M, M, M, M], cands([SPLIT, c, c, c], [0.9, 0.1, 0.1, 0.1]), book([M] * 4), settings=lev(steps=4))
    assert s.tokens.tolist() == [M, M, M, M] and s.book.original.tolist() == [False, True, True, True]
    assert s.inserts == (rule.Insert(0, 0, M),) and s.moved_to.tolist() == [1, 2, 3, -1]


@pytest.mark.parametrize("entry, steps, shares", [(5, 2, [3, 2]), (5, 4, [2, 1, 1, 1]), (2, 4, [1, 1, 0, 0])])
def test_the_schedule_spreads_the_entry_masks_remainder_first(entry, steps, shares):
    """No mask passes tau_mask: each step drafts its share of the entry masks, the most confident first."""
    W = 6
    tokens = [M] * entry + [a] * (W - entry)
    drafted = []
    bk = book(tokens)
    for t in range(steps):
        p = [0.1 + 0.01 * i for i in range(W)]  # the rightmost mask is the most confident
        s = step(tokens, cands([b] * W, p), bk, settings=lev(steps=steps, editing_threshold=None))
        drafted.append(int(s.drafted.sum()))
        tokens, bk = s.tokens.tolist(), s.book
    assert drafted == shares and M not in tokens


def test_each_new_mask_adds_one_transfer_and_the_schedule_end_drafts_every_mask():
    # entry 4 masks over 4 steps: a share of 1, plus 1 for the new mask at 3.
    bk = book([M, M, a, M], original=[True, True, False, False], entry_masks=4, step=1)
    s = step([M, M, a, M], cands([b, c, a, d], [0.3, 0.2, 0.9, 0.1]), bk, settings=lev(steps=4))
    assert s.drafted.tolist() == [True, True, False, False]
    bk = book([M, M, a, M], original=[True, True, False, False], entry_masks=4, step=4)  # the schedule is over
    s = step([M, M, a, M], cands([b, c, a, d], [0.3, 0.2, 0.9, 0.1]), bk, settings=lev(steps=4))
    assert s.drafted.tolist() == [True, True, False, True] and not s.final


def test_post_steps_count_once_no_original_mask_remains_then_the_final_round():
    settings = lev(max_post_steps=3)
    bk = book([a, M], original=[True, True], entry_masks=2, step=1, post=0)
    s = step([a, M], cands([a, b], [0.9, 0.1]), bk, settings=settings)
    assert s.book.post == 0 and s.drafted.tolist() == [False, True]  # an original mask was left at the start
    posts = []
    tokens, bk = s.tokens.tolist(), s.book
    for _ in range(3):  # c and d alternate at 1: never done by itself
        s = step(tokens, cands([a, c if tokens[1] != c else d], [0.9, 0.9]), bk, settings=settings)
        posts.append((s.book.post, s.final, s.done))
        tokens, bk = s.tokens.tolist(), s.book
    assert posts == [(1, False, False), (2, False, False), (3, True, True)]


def test_no_post_steps_makes_the_step_that_resolves_the_last_original_mask_final():
    s = step([a, M, M], cands([a, b, SPLIT], [0.9, 0.9, 0.1], plain=[PLAIN, c, d]), settings=lev(max_post_steps=0,
                                                                                                  steps=1))
    assert s.final and s.done and s.tokens.tolist() == [a, b, d]  # every mask drafted, SPLIT replaced by plain


def test_the_final_round_drafts_every_mask_and_writes_no_mask_delete_or_split():
    bk = book([a, M, b, M], original=[False, False, False, False], entry_masks=2, step=7, post=15)
    s = step([a, M, b, M], cands([DEL, SPLIT, c, d], [0.9, 0.01, 0.9, 0.01], plain=[a, d, b, c]), bk)
    assert s.final and s.done and s.book.post == 16
    assert s.tokens.tolist() == [a, d, c, d] and s.inserts == s.deletes == ()
    assert s.edited.tolist() == [False, False, True, False]  # DELETE at 0 became a (no change)
    capped = step([a, M, b, M], cands([a, c, b, d], [0.9, 0.01, 0.9, 0.01]),
                  book([a, M, b, M], entry_masks=2, step=9), settings=lev(max_steps=10))
    assert capped.final and M not in capped.tokens.tolist()  # the max_steps-th step is a final round too


@pytest.mark.parametrize("policy, expect", [(Escape.LEAST_CONFIDENT, 2), (Escape.RANDOM, None)])
def test_a_repeated_written_block_rewrites_one_changed_position_with_its_runner_up(policy, expect):
    tokens, x, p = [a, b, M, M], [a, c, d, a], [0.9, 0.8, 0.3, 0.6]
    written = (a, c, d, a)
    bk = book(tokens, original=[False, False, True, True], entry_masks=2, seen=frozenset({written}))
    gen = torch.Generator().manual_seed(3)
    _before.set_state(gen.get_state())
    s = step(tokens, cands(x, p, runner_up=[b, d, c, b]), bk, settings=lev(escape=policy, steps=1), generator=gen)
    if expect is None:  # the reference: uniform over the changed positions 1, 2, 3, from the generator
        expect = [1, 2, 3][int(torch.randint(3, (1,), generator=torch.Generator().manual_seed(3)))]
    assert s.escaped == expect and s.written[expect] == [b, d, c, b][expect]
    assert tuple(s.written.tolist()) in s.book.seen and written in s.book.seen
    fresh = step(tokens, cands(x, p), book(tokens, original=[False, False, True, True], entry_masks=2),
                 settings=lev(escape=policy, steps=1), generator=gen)
    assert fresh.escaped == -1 and tuple(fresh.written.tolist()) == written


def test_random_escapes_differ_with_the_seed():
    tokens, x = [M] * 6, [a, b, c, d, a, b]
    bk = book(tokens, seen=frozenset({tuple(x)}))
    picks = {rule.levenshtein_step(torch.tensor(tokens), cands(x, [0.9] * 6), torch.zeros(6, dtype=torch.bool), bk,
                                   lev(escape="random"), torch.Generator().manual_seed(s)).escaped for s in range(12)}
    assert len(picks) > 1 and picks <= set(range(6))


def test_post_count_policy_differs_only_when_an_original_mask_comes_back():
    # a caller that does not suppress the mask logit: T2T writes the mask over an original drafted token.
    bk = book([a, b], original=[True, True], entry_masks=2, step=3, post=2)
    s = step([a, b], cands([M, b], [0.9, 0.9]), bk)
    assert s.tokens.tolist() == [M, b] and s.book.post == 3
    for policy, post in ((PostCount.RESET, 0), (PostCount.CUMULATIVE, 3)):
        again = step([M, b], cands([c, b], [0.1, 0.9]), s.book, settings=lev(post_count=policy, max_post_steps=3))
        assert again.book.post == post and again.final == (policy is PostCount.CUMULATIVE)


def test_the_prompt_never_moves_and_its_literal_delete_and_split_stay_text():
    tokens = [DEL, SPLIT, M, a, M, b]  # the first three are the prompt's tail (a literal mask id among them)
    bk = book(tokens, original=[False] * 4 + [True, False], entry_masks=1)  # the prompt's mask id is text
    s = step(tokens, cands([a, a, a, SPLIT, c, DEL], [0.99] * 6), bk, frozen=3)
    assert s.tokens.tolist() == [DEL, SPLIT, M, M, a, c]
    assert s.moved_to.tolist()[:3] == [0, 1, 2] and s.inserts == (rule.Insert(3, 3, a),)
    assert s.deletes == (rule.Delete(5, b),) and not s.drafted[:3].any() and not s.edited[:3].any()
    assert s.book.original.tolist() == [False, False, False, False, False, True]


def test_candidates_from_logits_suppress_the_mask_and_name_the_runner_up_and_the_plain_token():
    logits = torch.zeros(3, 99)
    logits[0, [M, DEL, 5]] = torch.tensor([9.0, 8.0, 7.0])  # the mask is best, DELETE next
    logits[1, [SPLIT, DEL, 6]] = torch.tensor([9.0, 8.0, 1.0])
    logits[2, [3, 4]] = 5.0  # a tie: the lowest id
    cand = rule.levenshtein_candidates(logits, lev())
    assert cand.token.tolist() == [DEL, SPLIT, 3] and cand.runner_up.tolist() == [5, DEL, 4]
    assert cand.plain.tolist() == [5, 6, 3]
    assert torch.allclose(cand.p[0], torch.softmax(logits[0].index_fill(0, torch.tensor([M]), -torch.inf), 0)[DEL])


SETTINGS = [dict(max_post_steps=4), dict(max_post_steps=0, steps=2), dict(editing_threshold=None, steps=3),
            dict(post_count="cumulative", max_post_steps=2, threshold=0.75)]


def test_rows_decided_together_get_what_each_gets_alone():
    """R blocks stepped together for several steps equal each block stepped alone (moves, escapes, seen
    blocks and counters included), under each policy and several settings."""
    reached = {"move": 0, "escape": 0, "final": 0}
    for policy in Escape:
        for i, settings in enumerate(SETTINGS):
            for key, n in _together_and_alone(lev(escape=policy, **settings), seed=i).items():
                reached[key] += n
    assert all(reached.values()), reached  # the cases reach every branch


def _together_and_alone(settings: Levenshtein, seed: int) -> dict[str, int]:
    """Few token values and few p values make ties, p == tau and blocks that repeat."""
    g = torch.Generator().manual_seed(seed)
    R, W, vocab = 9, 7, [a, b, M, DEL, SPLIT]
    tokens = torch.where(torch.rand(R, W, generator=g) < 0.6, M, torch.randint(a, c, (R, W), generator=g))
    frozen = torch.arange(W)[None, :] < torch.randint(0, 3, (R, 1), generator=g)
    tokens[frozen] = torch.tensor(vocab)[torch.randint(0, 5, (int(frozen.sum()),), generator=g)]
    books = rule.start_block(tokens, frozen, M)
    alone = [rule.start_block(tokens[r], frozen[r], M) for r in range(R)]
    gens_rows = [torch.Generator().manual_seed(r) for r in range(R)]
    gens_alone = [torch.Generator().manual_seed(r) for r in range(R)]
    seen = {"move": 0, "escape": 0, "final": 0}
    def pick(values):
        return torch.tensor(values)[torch.randint(0, len(values), (R, W), generator=g)]

    # two proposals taken in turn (and now and then a fresh one): blocks that flip between two states repeat
    turns = [Candidates(pick(vocab), (torch.randint(0, 5, (R, W), generator=g) / 4).float(), pick([a, b, c]),
                        pick([a, b, c])) for _ in range(3)]
    for k in range(14):
        cand = turns[2 if k % 5 == 4 else k % 2]
        rows = rule.levenshtein_rows(tokens, cand, frozen, books, settings, gens_rows)
        for r in range(R):
            one = rule.levenshtein_step(tokens[r], Candidates(*(t[r] for t in vars(cand).values())), frozen[r],
                                        alone[r], settings, gens_alone[r])
            assert_same(rows.row(r), one)
            alone[r] = one.book
        seen["move"] += sum(map(len, rows.inserts)) + sum(map(len, rows.deletes))
        seen["escape"] += int((rows.escaped >= 0).sum())
        seen["final"] += int(rows.final.sum())
        tokens, books = rows.tokens, rows.book
    return seen


@pytest.mark.parametrize("bad, message", [
    (dict(frozen=torch.tensor([False, True, False])), "frozen must be a prefix"),
    (dict(plain=[a, DEL, a]), "plain must be neither"),
    (dict(settings=lev(escape="random")), "needs a torch.Generator"),
    (dict(tokens=[a, b]), "tensors of one shape"),
])
def test_bad_inputs_are_refused(bad, message):
    tokens = torch.tensor(bad.get("tokens", [a, M, b]))
    frozen = bad.get("frozen", torch.zeros(len(tokens), dtype=torch.bool))
    with pytest.raises(ValueError, match=message):
        rule.levenshtein_step(tokens, cands([a, b, c], [0.9] * 3, plain=bad.get("plain")), frozen,
                              book([a, M, b]), bad.get("settings", lev()))


@pytest.mark.parametrize("kw, message", [(dict(split_id=DEL), "three ids"), (dict(threshold=1.5), "threshold"),
                                         (dict(steps=0), "steps"), (dict(escape="sometimes"), "sometimes")])
def test_bad_settings_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        Levenshtein(**{"mask_id": M, "delete_id": DEL, "split_id": SPLIT} | kw)


def test_a_one_position_block_can_split_its_only_mask():
    s = step([M], cands([SPLIT], [0.9]), settings=lev(steps=1))
    # [new mask, the original mask] cut to one position: the original is pushed out, post-steps may start
    assert s.tokens.tolist() == [M] and s.book.original.tolist() == [False]
    assert s.inserts == (rule.Insert(0, 0, M),) and s.moved_to.tolist() == [-1]


def test_the_final_round_never_escapes():
    bk = book([a, b], original=[False, False], entry_masks=0, step=3, post=15, seen=frozenset({(c, b)}))
    s = step([a, b], cands([c, b], [0.9, 0.9]), bk)
    assert s.final and s.escaped == -1 and s.tokens.tolist() == [c, b]
