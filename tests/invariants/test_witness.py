"""The write-all witness: which program, element and loop iteration write an address, solved from the store's index
expressions. A transposed convolution's phase addresses (od = qd * SD + rd with the phase rd a constant, qd and qh
the div and mod of one program id) are solved, so its write-all proof needs no enumeration of programs; every guess
is checked by substituting it back."""
from __future__ import annotations

import itertools

import z3

from argus_inductor.invariants.obligations import solve_witness


def _eval(e: z3.ExprRef, env: dict[str, int]) -> int:
    sub = [(z3.Int(n), z3.IntVal(v)) for n, v in env.items()]
    return z3.simplify(z3.substitute(e, *sub)).as_long()


def test_phase_addresses_of_a_transposed_convolution_are_solved() -> None:
    pq, pmn, ax1, rd, rh, rw = (z3.Int(n) for n in ("pid:pq", "pid:pmn", "_ax1", "it:rd", "it:rh", "it:rw"))
    exprs = [pq / 64 + rd, 2 * (pq % 64) + rh, 128 * pmn + 2 * ax1 + rw]
    extents = {"pid:pq": z3.IntVal(64 * 5), "pid:pmn": z3.IntVal(3), "_ax1": z3.IntVal(64), "it:rd": z3.IntVal(1),
               "it:rh": z3.IntVal(2), "it:rw": z3.IntVal(2)}
    targets = [z3.Int(f"addr{d}") for d in range(3)]
    assign = solve_witness(list(zip(exprs, targets)), extents, set(extents))
    assert assign is not None and set(assign) == set(extents)
    for od, oh, ow in itertools.product(range(5), range(0, 128, 7), range(0, 384, 11)):
        at = {"addr0": od, "addr1": oh, "addr2": ow}
        env = {n: _eval(t, at) for n, t in assign.items()}
        assert all(0 <= env[n] < extents[n].as_long() for n in env), env
        assert [_eval(e, env) for e in exprs] == [od, oh, ow], (at, env)


def test_a_lowest_digit_of_weight_above_one_is_guessed_and_the_guess_is_checked() -> None:
    v = z3.Int("v")
    assign = solve_witness([(4 * v + 3, z3.Int("addr0"))], {"v": z3.IntVal(10)}, {"v"})
    assert assign is not None
    guess = {"v": _eval(assign["v"], {"addr0": 11})}
    assert guess == {"v": 2} and _eval(4 * v + 3, guess) == 11
    miss = {"v": _eval(assign["v"], {"addr0": 12})}  # 12 is no 4 * v + 3: the substituted address says so
    assert _eval(4 * v + 3, miss) != 12


def test_digits_that_do_not_chain_are_not_solved() -> None:
    a, b = z3.Int("a"), z3.Int("b")
    # 3 * a + b with b < 4: the digits overlap (b's extent is not 3), so no unique guess
    assert solve_witness([(3 * a + b, z3.Int("addr0"))], {"a": z3.IntVal(5), "b": z3.IntVal(4)}, {"a", "b"}) is None
