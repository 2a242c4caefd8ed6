"""The decorator's options (docs/language.md, "Flat and grouped kernels"): a bad one is a
KernelError that names the kernel and points at the decorator (the first line of the
function's source), never a TypeError from Python's call or an error without a place.
Found by tests/test_mutation_fuzz.py."""

from __future__ import annotations

import inspect

import pytest
from error_helpers import assert_points_at

import tessera
from tessera import f32, kernel, mut, tile
from tessera.kernel.kernel import MAX_GROUP_LANES

FILE = inspect.getsourcefile(inspect.currentframe())


def copy(x: f32[n], y: mut[f32[n]]):  # E:copy
    y[tile.linear_id()] = x[tile.linear_id()]


def refused(needle: str, *args, **options) -> str:
    """Declare ``copy`` with these decorator arguments: a KernelError naming it, with
    ``needle`` in the message, pointing at the first line of its source."""
    with pytest.raises(tessera.KernelError) as info:
        kernel(*args, **options)(copy)
    message = str(info.value)
    assert info.value.kernel == "copy" and needle in message, message
    assert_points_at(message, FILE, "copy", "def")
    return message


def test_an_unknown_option_names_the_kernel_and_the_options():
    message = refused("no option 'mask'", tile=(4,), mask=True)
    assert "tile, shared, target, boundscheck" in message


def test_an_option_passed_by_position_is_refused():
    refused("options by name", (128,))


def test_an_option_passed_by_position_after_the_function_is_refused():
    with pytest.raises(tessera.KernelError, match="options by name"):
        kernel(copy, 128)


@pytest.mark.parametrize("tile_", [0.5, True, -1, 0, (), (1, 2, 3, 4), (4, None), (2.0,)])
def test_a_tile_that_is_not_1_to_3_positive_ints_points_at_the_decorator(tile_):
    refused("must be 1 to 3 positive ints", tile=tile_)


def test_a_tile_naming_no_constexpr_parameter_points_at_the_decorator():
    refused("names '4', which is not a constexpr parameter", tile="4")


def test_a_group_of_more_lanes_than_the_limit_points_at_the_decorator():
    refused(f"at most {MAX_GROUP_LANES}", tile=(MAX_GROUP_LANES, 2))


def test_a_group_of_as_many_lanes_as_the_limit_compiles():
    assert kernel(tile=(MAX_GROUP_LANES,))(copy).lanes == MAX_GROUP_LANES


@pytest.mark.parametrize("shared", [0.5, -1, "1k", 1e3])
def test_a_shared_budget_that_is_not_a_number_of_bytes_points_at_the_decorator(shared):
    refused("must be a number of bytes", tile=(4,), shared=shared)


def test_an_unknown_target_points_at_the_decorator():
    refused("unknown target 'gpu'", target="gpu")


def test_a_boundscheck_that_is_not_a_bool_points_at_the_decorator():
    refused("must be True or False", boundscheck="yes")


def test_decorating_something_else_than_a_function_is_a_tessera_error():
    with pytest.raises(tessera.TesseraError, match="decorates a function, not int"):
        kernel(tile=(4,))(5)


def test_a_helper_must_be_a_function():
    with pytest.raises(tessera.TesseraError, match="decorates a function, not builtin"):
        tessera.func(len)


def k_ok(x: f32[n], y: mut[f32[n]]):
    y[tile.linear_id()] = x[tile.linear_id()]


def test_good_options_still_compile():
    k = kernel(tile=4, shared=0, boundscheck=False)(k_ok)
    assert k.options.tile == (4,)
