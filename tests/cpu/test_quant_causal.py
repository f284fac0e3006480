"""check_causal on what a bit comparison of the future cannot see alone: outputs that depend on the
series' length, functions that raise on a perturbed copy or are not deterministic, object outputs."""
import re

import numpy as np
import pytest

from tickgpu.quant import AbsMaxObserver, CausalityError, MinMaxObserver, check_causal


def _series(rng, t=40):
    return rng.standard_normal((t, 3))


def test_object_outputs_are_refused_at_the_baseline(rng):
    x = rng.standard_normal(10)
    with pytest.raises(TypeError, match=r"^fn: output 'output' must be a numeric or bool array, got dtype object"):
        check_causal(lambda s: np.array([float(v) for v in np.cumsum(s)], dtype=object), x)
    # bool and integer outputs are numbers to compare
    assert check_causal(lambda s: np.cumsum(s) > 0, x).checks > 0


def test_an_output_that_turns_into_objects_on_a_perturbed_copy_is_reported_not_a_crash(rng):
    x = rng.standard_normal(10)

    def turns(s):
        out = np.cumsum(s)
        return out.astype(object) if np.isnan(s).any() else out

    with pytest.raises(CausalityError, match=r"at tick 0 changed .* nan.*dtype changed from float64 to object"):
        check_causal(turns, x)


def _length_leak(s):
    return s * np.arange(len(s)) / len(s)


def _centred_mean(s):
    # a centred 5-tick window that shrinks at the end: looks two ticks ahead, which no perturbation
    # of the values before the cut reveals when the cut falls past the series' last window
    return np.array([s[max(0, t - 2): t + 3].mean() for t in range(len(s))])


def test_truncation_catches_a_dependence_on_the_number_of_ticks(rng):
    x = rng.standard_normal(10)
    with pytest.raises(CausalityError) as caught:
        check_causal(_length_leak, x)
    msg = str(caught.value)
    assert re.search(r"at tick 1 changed when the series was truncated at cut 2 \(ticks >= 2 removed\)", msg)
    assert "depends on the future" in msg
    # without the truncation it passes: what the check used to miss
    report = check_causal(_length_leak, x, truncate=False)
    assert report.checks > 0 and report.truncated_checks == 0


def test_truncation_is_counted_and_causal_functions_pass_it(rng):
    series = _series(rng)
    report = check_causal(lambda s: MinMaxObserver().trace(s), series, cuts=[3, 17, 39])
    assert report.checks == 3 * 4 * 4 and report.truncated_checks == 3 * 4
    batches = [rng.standard_normal((int(rng.integers(0, 4)), 2)) for _ in range(20)]
    report = check_causal(lambda s: AbsMaxObserver(axis=-1).trace(s), batches, cuts=[1, 10, 19])
    assert report.truncated_checks == 3 * 4


def test_truncation_needs_one_row_per_tick_of_the_truncated_series(rng):
    x = rng.standard_normal(12)
    n = len(x)

    def fixed_length(s):          # pads to the length of the series it was written for
        out = np.zeros(n)
        out[:len(s)] = np.cumsum(s)
        return out

    with pytest.raises(ValueError, match=r"output 'output' must have one row per tick, on the series truncated "
                                         r"at cut 1 too \(1 ticks\), got shape \(12,\)"):
        check_causal(fixed_length, x)


def test_fn_raising_on_a_perturbed_copy_names_the_cut_and_the_perturbation(rng):
    x = rng.standard_normal(10)
    with pytest.raises(RuntimeError, match=r"^fn raised on the series perturbed by 'nan' from cut 1: "
                                           r"ValueError: x \(tick 1\) at index \(\): must be finite") as caught:
        check_causal(lambda s: MinMaxObserver(strict=True).trace(s)["scale"], x)
    assert isinstance(caught.value.__cause__, ValueError)
    # without NaN it is checked
    check_causal(lambda s: MinMaxObserver(strict=True).trace(s)["scale"], x, perturbations=("noise", "zeros"))


def test_fn_raising_on_a_truncated_copy_names_the_cut(rng):
    x = rng.standard_normal(10)

    def needs_five(s):
        if len(s) < 5:
            raise IndexError("too short")
        return np.cumsum(s)

    with pytest.raises(RuntimeError, match=r"^fn raised on the series truncated at cut 1 \(ticks >= 1 removed\): "
                                           r"IndexError: too short") as caught:
        check_causal(needs_five, x)
    assert isinstance(caught.value.__cause__, IndexError)
    assert check_causal(needs_five, x, truncate=False).checks > 0


def test_a_function_that_is_not_deterministic_is_not_reported_as_a_leak(rng):
    x = rng.standard_normal(10)
    gen = np.random.default_rng(1)
    with pytest.raises(ValueError, match=r"^fn: is not deterministic: output 'output' at tick 0 differs"):
        check_causal(lambda s: s + gen.random(s.shape), x)
    calls = []

    def drifts(s):                 # the same on every call but the second
        calls.append(1)
        return np.cumsum(s) + (len(calls) == 2)

    with pytest.raises(ValueError, match="not deterministic"):
        check_causal(drifts, x)
    # a NaN output is the same bits twice: deterministic
    assert check_causal(lambda s: np.full(len(s), np.nan), x).checks > 0


def _one_tick_ahead(s):
    return np.concatenate([s[1:], np.zeros_like(s[:1])])


def test_a_perturbation_that_changes_nothing_is_skipped_not_counted(rng):
    """Zeros on a zero series, NaN on a NaN series: the 'perturbed' run is the series itself, so
    its agreement proves nothing; counted as checks, a look-ahead passed."""
    with pytest.raises(ValueError, match=r"nothing was compared.*'zeros' left the ticks from the cut on as they were"):
        check_causal(_one_tick_ahead, np.zeros((20, 2)), perturbations=("zeros",), truncate=False)
    with pytest.raises(ValueError, match=r"nothing was compared.*'nan' left the ticks"):
        check_causal(_one_tick_ahead, np.full(20, np.nan), perturbations=("nan", "noise"), truncate=False)
    batches = [np.zeros(3) for _ in range(6)]
    with pytest.raises(ValueError, match=r"nothing was compared.*'zeros' left the ticks"):
        check_causal(lambda b: _one_tick_ahead(np.array([x.sum() for x in b])), batches, perturbations=("zeros",))
    # the perturbations that do change the future still run, and catch the look-ahead
    report = check_causal(lambda s: np.cumsum(s, axis=0), np.full((6, 2), np.nan))
    assert report.skipped == [f"{k}@{c}" for c in range(1, 6) for k in ("noise", "nan")]
    assert report.checks == 5 * 2
    with pytest.raises(CausalityError, match="replaced by outliers"):
        check_causal(_one_tick_ahead, np.zeros(20), perturbations=("zeros", "outliers"))


def test_cuts_seed_and_fn_of_the_wrong_type_are_named():
    """A cut of 'a' raised int()'s error and one of 1.7 was silently cut 1; a seed of 'x' raised
    NumPy's SeedSequence error; fn of 3 "'int' object is not callable"."""
    x = np.arange(10.0)
    f = lambda s: np.cumsum(s)   # noqa: E731
    for cuts in (["a"], [1.7], [2, True]):
        with pytest.raises(TypeError, match=r"^cuts: must be None, an int or a list of ints, got elements"):
            check_causal(f, x, cuts=cuts)
    with pytest.raises(TypeError, match=r"^seed: must be an int, got 'x'"):
        check_causal(f, x, seed="x")
    with pytest.raises(TypeError, match=r"^fn: must be a callable of the series, got 3"):
        check_causal(3, x)
    assert check_causal(f, x, cuts=np.array([2, 5]), seed=np.int64(3)).cuts == [2, 5]


@pytest.mark.filterwarnings("error")
def test_float16_series_are_perturbed_without_overflow_warnings():
    x = np.arange(20, dtype=np.float16) * 1000
    with pytest.raises(CausalityError):
        check_causal(lambda s: np.concatenate([s[1:], s[:1]]), x)
    assert check_causal(lambda s: s.astype(np.float64) * 2, x).checks > 0
