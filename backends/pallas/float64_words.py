"""IEEE binary64 arithmetic on pairs of 32-bit words, for TPU kernels (a TPU has no float64 unit).

The eviction state is float64 and its arithmetic is pinned bit for bit (spec/eviction.md EV-4, EV-6,
EV-7; spec/numerics.md NU-EV1, NU-EV2): one correctly rounded addition per token, one correctly rounded
division by a count, left-to-right block sums, exact comparison. The kernels therefore carry each float64
as its bit pattern, split into a high and a low 32-bit word (int32 arrays of one shape; the host splits
and joins with `split` / `join`), and compute with 32-bit integer vector operations only: adds,
subtracts, logical shifts, compares and selects, which every TPU generation has. Words are unsigned
quantities held in int32 lanes: shifts are logical and unsigned comparisons flip the sign bit first.

What is implemented, each exactly as IEEE 754 round-to-nearest-even on float64:
- `add(a, b)`: a + b, including subnormals, signed zeros (x + (-x) = +0, -0 + -0 = -0), overflow to
  +-inf and inf/NaN operands;
- `div_count(a, c)`: a / c for an integer 1 <= c < 2**31 (EV-6's `acc / counts`), by restoring long
  division (one quotient bit per step, 94 steps), subnormal results included;
- `order_key(a)`: a pair of words whose unsigned lexicographic order is the numeric order of finite a
  (-0 and +0 equal), for EV-10's comparison; `less(ka, kb)` compares two keys.

Internally a finite value is (sign, E, F): F a 63-bit significand field held in two words (hi < 2**31),
value = F * 2**(E - 1085), normalized so that bit 62 of F is set whenever E > 1 (E is the biased
exponent, 1 for subnormals). The 10 bits below a float64's 53-bit significand are guard bits: a right
shift ORs every bit it drops into bit 0 (the sticky bit), which keeps one final rounding correct.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

_INT_MIN = np.int32(-2 ** 31)
_EXP_MAX = 2047
_GUARD = 10          # guard bits below the 53-bit significand in F
_BIAS_F = 1085       # value = F * 2**(E - _BIAS_F) = m * 2**(E - 1075) with F = m << _GUARD


# --- host side -------------------------------------------------------------------------------------

def split(x) -> tuple[np.ndarray, np.ndarray]:
    """float64 array -> (hi, lo) int32 arrays of its bit pattern (hi holds sign, exponent, top 20 bits)."""
    bits = np.ascontiguousarray(np.asarray(x, np.float64)).view(np.uint64)
    return (bits >> np.uint64(32)).astype(np.uint32).view(np.int32), \
        (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)


def join(hi, lo) -> np.ndarray:
    """(hi, lo) int32 words -> the float64 array they encode."""
    h = np.asarray(hi).view(np.uint32).astype(np.uint64)
    l_ = np.asarray(lo).view(np.uint32).astype(np.uint64)
    return ((h << np.uint64(32)) | l_).view(np.float64)


# --- 32- and 64-bit word helpers (x, y int32 arrays holding unsigned words) ------------------------

def _i32(v: int):
    """The int32 holding the unsigned 32-bit word v."""
    return jnp.int32(np.array(v, np.uint32).view(np.int32))


def _srl(x, n):
    """x >> n, logical, for 0 <= n <= 31 (n may be an array)."""
    return lax.shift_right_logical(x, jnp.asarray(n, jnp.int32))


def _sll(x, n):
    return lax.shift_left(x, jnp.asarray(n, jnp.int32))


def _ult(x, y):
    """Unsigned x < y."""
    return (x ^ _INT_MIN) < (y ^ _INT_MIN)


def _add64(ah, al, bh, bl):
    lo = al + bl
    return ah + bh + _ult(lo, al).astype(jnp.int32), lo


def _sub64(ah, al, bh, bl):
    """a - b for a >= b (unsigned 64-bit)."""
    return ah - bh - _ult(al, bl).astype(jnp.int32), al - bl


def _shr64_sticky(hi, lo, n):
    """(hi, lo) >> n for n >= 0 (any size), with every dropped bit ORed into bit 0."""
    n = jnp.asarray(n, jnp.int32)
    big = n >= 32                                     # first move a whole word
    dropped = jnp.where(big, lo, 0)
    lo = jnp.where(big, hi, lo)
    hi = jnp.where(big, 0, hi)
    m = jnp.where(big, n - 32, n)
    gone = m >= 32                                    # n >= 64: nothing is left but the sticky bit
    dropped = dropped | jnp.where(gone, lo | hi, 0)
    lo = jnp.where(gone, 0, lo)
    hi = jnp.where(gone, 0, hi)
    s = jnp.clip(m, 0, 31)
    keep = s > 0
    mask = jnp.where(keep, _srl(_i32(0xFFFFFFFF), 32 - jnp.maximum(s, 1)), 0)
    dropped = dropped | (lo & mask)
    lo = jnp.where(keep, _srl(lo, s) | _sll(hi, 32 - jnp.maximum(s, 1)), lo)
    hi = jnp.where(keep, _srl(hi, s), hi)
    return hi, lo | (dropped != 0).astype(jnp.int32)


def _shl64(hi, lo, n):
    """(hi, lo) << n for 0 <= n <= 63."""
    n = jnp.asarray(n, jnp.int32)
    big = n >= 32
    hi = jnp.where(big, lo, hi)
    lo = jnp.where(big, 0, lo)
    s = jnp.where(big, n - 32, n)
    keep = s > 0
    hi = jnp.where(keep, _sll(hi, s) | _srl(lo, 32 - jnp.maximum(s, 1)), hi)
    lo = jnp.where(keep, _sll(lo, s), lo)
    return hi, lo


def _leading_zeros64(hi, lo):
    """Leading zero bits of the 64-bit word (64 for 0), by binary search (no count-leading-zeros op)."""
    zero = (hi == 0) & (lo == 0)
    n = jnp.zeros_like(hi)
    for width in (32, 16, 8, 4, 2, 1):
        empty = (hi == 0) if width == 32 else (_srl(hi, 32 - width) == 0)
        sh, sl = _shl64(hi, lo, width)
        hi, lo = jnp.where(empty, sh, hi), jnp.where(empty, sl, lo)
        n = n + jnp.where(empty, width, 0)
    return jnp.where(zero, 64, n)


# --- unpack, round, pack -----------------------------------------------------------------------------

def _unpack(hi, lo):
    """(sign, E, F hi, F lo, special): special marks inf/NaN (E = 2047), whose words pass through."""
    sign = _srl(hi, 31)
    e = _srl(hi, 20) & 0x7FF
    mh = hi & 0xFFFFF
    mh = jnp.where(e > 0, mh | 0x100000, mh)          # the hidden bit of normal numbers
    E = jnp.maximum(e, 1)                             # subnormals: exponent 1, no hidden bit
    fh, fl = _shl64(mh, lo, _GUARD)
    return sign, E, fh, fl, e == _EXP_MAX


def _round_pack(sign, E, fh, fl):
    """Round (sign, E, F) to the nearest float64, ties to even, and return its words. F < 2**63 with bit 62
    set if E > 1; E may be below 1 (a subnormal result: F is shifted right into E = 1 first) or above
    2046 (overflow to inf)."""
    under = 1 - E
    fh, fl = _shr64_sticky(fh, fl, jnp.maximum(under, 0))
    E = jnp.maximum(E, 1)
    mh, ml = _srl(fh, _GUARD), _srl(fl, _GUARD) | _sll(fh, 32 - _GUARD)
    rest = fl & ((1 << _GUARD) - 1)
    half = 1 << (_GUARD - 1)
    up = (rest > half) | ((rest == half) & ((ml & 1) == 1))
    mh, ml = _add64(mh, ml, jnp.zeros_like(mh), up.astype(jnp.int32))
    carry = mh >= 0x200000                            # rounded up to 2**53: renormalize
    mh = jnp.where(carry, 0x100000, mh)
    E = jnp.where(carry, E + 1, E)
    exp_field = jnp.where(mh >= 0x100000, E, 0)      # no hidden bit: subnormal (or zero)
    overflow = exp_field >= _EXP_MAX
    hi = _sll(sign, 31) | jnp.where(overflow, _i32(0x7FF00000), _sll(exp_field, 20) | (mh & 0xFFFFF))
    lo = jnp.where(overflow, 0, ml)
    return hi, lo


def _normalize(E, fh, fl):
    """Shift F left until bit 62 is set, as far as E > 1 allows (subnormals stay at E = 1)."""
    shift = jnp.clip(_leading_zeros64(fh, fl) - 1, 0, jnp.maximum(E - 1, 0))
    fh, fl = _shl64(fh, fl, shift)
    return E - shift, fh, fl


# --- operations --------------------------------------------------------------------------------------

def add(ah, al, bh, bl):
    """Words of fl64(a + b) (IEEE 754, round to nearest even) for words a, b of any shape."""
    sa, ea, fah, fal, spa = _unpack(ah, al)
    sb, eb, fbh, fbl, spb = _unpack(bh, bl)
    # order by magnitude: |a| >= |b| after the swap
    a_smaller = (ea < eb) | ((ea == eb) & (_ult(fah, fbh) | ((fah == fbh) & _ult(fal, fbl))))
    sa, sb = jnp.where(a_smaller, sb, sa), jnp.where(a_smaller, sa, sb)
    ea, eb = jnp.where(a_smaller, eb, ea), jnp.where(a_smaller, ea, eb)
    fah, fbh = jnp.where(a_smaller, fbh, fah), jnp.where(a_smaller, fah, fbh)
    fal, fbl = jnp.where(a_smaller, fbl, fal), jnp.where(a_smaller, fal, fbl)
    fbh, fbl = _shr64_sticky(fbh, fbl, ea - eb)       # align b to a's exponent, sticky into bit 0
    same = sa == sb
    sh, sl = _add64(fah, fal, fbh, fbl)
    dh, dl = _sub64(fah, fal, fbh, fbl)
    fh, fl = jnp.where(same, sh, dh), jnp.where(same, sl, dl)
    over = fh < 0                                     # a same-sign sum reached bit 63
    oh, ol = _shr64_sticky(fh, fl, 1)
    fh, fl = jnp.where(over, oh, fh), jnp.where(over, ol, fl)
    E = jnp.where(over, ea + 1, ea)
    E, fh, fl = _normalize(E, fh, fl)
    zero = (fh == 0) & (fl == 0)
    sign = jnp.where(zero & ~same, 0, sa)            # exact cancellation gives +0 (ties to even)
    hi, lo = _round_pack(sign, E, fh, fl)
    # inf and NaN operands: NaN wins, inf - inf is NaN, else the inf
    nan_a = spa & (((ah & 0xFFFFF) | al) != 0)
    nan_b = spb & (((bh & 0xFFFFF) | bl) != 0)
    inf_clash = spa & spb & ~nan_a & ~nan_b & (_srl(ah, 31) != _srl(bh, 31))
    hi = jnp.where(spb, bh, hi)
    lo = jnp.where(spb, bl, lo)
    hi = jnp.where(spa, ah, hi)
    lo = jnp.where(spa, al, lo)
    hi = jnp.where(nan_b & ~nan_a, bh, hi)
    lo = jnp.where(nan_b & ~nan_a, bl, lo)
    hi = jnp.where(inf_clash, _i32(0x7FF80000), hi)
    lo = jnp.where(inf_clash, 0, lo)
    return hi, lo


_DIV_STEPS = 94      # 53 significand bits + 11 + 30: the most quotient bits a count below 2**31 needs


def div_count(ah, al, c):
    """Words of fl64(a / c) for finite words a and int32 counts 1 <= c < 2**31 (same shape)."""
    sign, E, fh, fl, _ = _unpack(ah, al)
    mh, ml = _srl(fh, _GUARD), _srl(fl, _GUARD) | _sll(fh, 32 - _GUARD)     # the 53-bit significand m
    zero = (mh == 0) & (ml == 0)
    shift = jnp.clip(_leading_zeros64(mh, ml) - 11, 0, 63)                 # subnormal: bring bit 52 up
    mh, ml = _shl64(mh, ml, shift)
    E = E - shift
    p = jnp.zeros_like(c)                                                   # p = floor(log2 c)
    for width in (16, 8, 4, 2, 1):
        up = _srl(c, p + width) > 0
        p = jnp.where(up, p + width, p)
    # Q = floor(m * 2**(11 + p) / c) in (2**62, 2**64): the numerator's bits, most significant first, are
    # m's 53 bits then 11 + p zeros; restoring division keeps the remainder r < c < 2**31.
    steps = 64 + p

    def step(k, state):
        qh, ql, r = state
        bit = jnp.where(k < 53, _srl(jnp.where(k < 21, mh, ml), jnp.where(k < 21, 20 - k, 52 - k) & 31) & 1, 0)
        live = k < steps
        take = r >= c - r - bit                      # 2r + bit >= c without overflowing int32
        r_new = jnp.where(take, r - (c - r - bit), 2 * r + bit)
        q_new_h = _sll(qh, 1) | _srl(ql, 31)
        q_new_l = _sll(ql, 1) | take.astype(jnp.int32)
        return (jnp.where(live, q_new_h, qh), jnp.where(live, q_new_l, ql), jnp.where(live, r_new, r))

    zeros = jnp.zeros_like(c)
    qh, ql, r = lax.fori_loop(0, _DIV_STEPS, step, (zeros, zeros, zeros))
    ql = ql | (r != 0).astype(jnp.int32)              # sticky: the remainder
    # value = Q * 2**(E - 1075 - 11 - p) = F * 2**(E' - 1085) with E' = E - 1 - p; Q >= 2**63 shifts once
    E = E - 1 - p
    over = qh < 0
    oh, ol = _shr64_sticky(qh, ql, 1)
    qh, ql = jnp.where(over, oh, qh), jnp.where(over, ol, ql)
    E = jnp.where(over, E + 1, E)
    hi, lo = _round_pack(sign, E, qh, ql)
    return jnp.where(zero, _sll(sign, 31), hi), jnp.where(zero, 0, lo)


def order_key(hi, lo):
    """Words whose unsigned lexicographic order is the numeric order of the finite float64 (hi, lo), with
    -0 == +0: negative numbers have every bit flipped, others the sign bit."""
    neg_zero = (hi == _INT_MIN) & (lo == 0)
    hi = jnp.where(neg_zero, 0, hi)
    neg = hi < 0
    return jnp.where(neg, ~hi, hi ^ _INT_MIN), jnp.where(neg, ~lo, lo)


def less(ah, al, bh, bl):
    """Unsigned lexicographic (ah, al) < (bh, bl) on order keys."""
    return _ult(ah, bh) | ((ah == bh) & _ult(al, bl))


__all__ = ["split", "join", "add", "div_count", "order_key", "less"]
