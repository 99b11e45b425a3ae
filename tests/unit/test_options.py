"""Bad magic arguments are refused before anything launches, with the option named and what to write.

Checked twice: through ``parse_options`` and through the magic in a real IPython shell, where each
must surface as a short UsageError line, never a traceback.
"""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jupyter_torchdist.core.options import OptionsError, RunOptions, parse_options

# (argument line, text the error must contain: the option and the hint)
BAD = [
    ("-n 0", ["-n/--nprocs", ">= 1", "-n 2"]),
    ("-n -3", ["-n/--nprocs", ">= 1"]),
    ("-n zero", ["-n/--nprocs", "whole number", "'zero'"]),
    ("-n 2.5", ["-n/--nprocs", "whole number"]),
    ("-n", ["-n/--nprocs", "expected one argument"]),
    ("--bogus", ["unrecognized arguments: --bogus", "usage: %%distribute"]),
    ("--timout 5", ["--timout", "did you mean --timeout?"]),
    ("-n 2 --gpus", ["did you mean --gpu?"]),
    ("--timeout 0", ["--timeout", "> 0"]),
    ("--timeout -5", ["--timeout", "> 0"]),
    ("--timeout abc", ["--timeout", "expected a number"]),
    ("--timeout inf", ["--timeout", "finite"]),
    ("--timeout nan", ["--timeout", "finite"]),
    ("--threads 0", ["--threads", ">= 1"]),
    ("--max-payload-mb 0", ["--max-payload-mb", "> 0"]),
    ("--max-payload-mb inf", ["--max-payload-mb", "finite"]),
    ("--max-value-mb -1", ["--max-value-mb", "> 0"]),
    ("-o 1x", ["-o/--output", "Python name"]),
    ("--gpu=1", ["--gpu", "ignored explicit argument"]),
    ("-n 2 'unclosed", ["could not split"]),
]


@pytest.mark.parametrize("line, expect", BAD, ids=[b[0] for b in BAD])
def test_parse_options_refuses_with_the_option_named(line, expect):
    with pytest.raises(OptionsError) as info:
        parse_options(line)
    for text in expect:
        assert text in str(info.value), f"{line!r}: {text!r} missing from {info.value}"


def test_good_lines_parse_to_the_right_values():
    o = parse_options("-n 3 --all-ranks -o out --timeout 2.5 --threads 2 --max-value-mb 8 -q")
    assert (o.n, o.all_ranks, o.output, o.timeout, o.backend_threads, o.max_value_mb, o.quiet) == \
        (3, True, "out", 2.5, 2, 8.0, True)
    assert parse_options("") == RunOptions(n_explicit=False)
    assert parse_options("-n 2") == RunOptions()
    keep = parse_options("--keep")
    assert keep.keep and keep.n == 2 and not keep.n_explicit
    assert parse_options("-n 2 train.py --lr 0.1").script == ("train.py", "--lr", "0.1")


def test_options_object_itself_validates():
    """The API path (run(n=0)) builds RunOptions directly: it must refuse the same values."""
    for kwargs in ({"n": 0}, {"n": True}, {"n": 2.0}, {"timeout": float("inf")}, {"max_value_mb": float("nan")},
                   {"backend_threads": 0}):
        with pytest.raises(OptionsError):
            RunOptions(**kwargs)


@pytest.mark.parametrize("line", ["-n 0", "-n zero", "--bogus", "--timeout -1", "-n 2 extra_arg"])
def test_magic_shows_a_usage_error_not_a_traceback(shell, capsys, line):
    result = shell.run_cell(f"%%distribute {line}\n1 + 1\n")
    out = capsys.readouterr()
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    shown = out.out + out.err
    assert "UsageError" in shown
    assert "Traceback" not in shown and "jupyter_torchdist/" not in shown
    # the shown message names the option the user typed
    token = line.split()[-1] if line != "-n 2 extra_arg" else "extra_arg"
    assert (token in shown) or ("-n/--nprocs" in shown)


def test_wait_takes_seconds_and_zero_fails_at_once():
    from jupyter_torchdist.core.options import DEFAULT_WAIT_S

    assert parse_options("-n 2").wait == DEFAULT_WAIT_S
    assert parse_options("-n 2 --wait 300").wait == 300.0
    assert parse_options("-n 2 --wait 0").wait == 0.0
    for bad in ("--wait -1", "--wait nan", "--wait soon"):
        with pytest.raises(OptionsError, match="--wait"):
            parse_options(f"-n 2 {bad}")


def test_stall_after_takes_seconds_zero_is_never_and_pdb_is_a_switch_shown_in_the_report():
    from jupyter_torchdist.core.options import DEFAULT_STALL_AFTER_S

    assert parse_options("-n 2").stall_after == DEFAULT_STALL_AFTER_S and not parse_options("-n 2").pdb
    options = parse_options("-n 2 --stall-after 5 --pdb")
    assert options.stall_after == 5.0 and options.pdb
    assert options.summary()["pdb"] is True and options.summary()["stall_after"] == 5.0
    assert "pdb" not in parse_options("-n 2").summary(), "defaults stay out of the report's option chips"
    assert parse_options("--stall-after 0").stall_after == 0.0
    for bad in ("--stall-after -1", "--stall-after inf", "--stall-after soon"):
        with pytest.raises(OptionsError, match="--stall-after"):
            parse_options(f"-n 2 {bad}")
