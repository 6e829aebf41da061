"""``tbr demo`` argument checks for the stand-in pools' natural answer lengths (issue 30 item 6)."""

from __future__ import annotations

import argparse

import pytest

from tbr.cmd_demo import natural_pool_args, natural_problem


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"natural_output_tokens": "", "two_models": False, "pools": "mock", "seed": 3}
    return argparse.Namespace(**{**base, **kw})


def test_natural_lengths_become_seeded_pool_arguments() -> None:
    assert natural_problem(_args()) is None and natural_pool_args(_args()) == ()
    args = _args(natural_output_tokens="lognormal:300:1.0")
    assert natural_problem(args) is None
    assert natural_pool_args(args) == (
        "--natural-output-tokens",
        "lognormal:300:1.0",
        "--natural-output-seed",
        "3",
    )


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"natural_output_tokens": "gauss:1"}, "fixed:N or lognormal"),
        ({"natural_output_tokens": "fixed:5000", "two_models": True}, "two-pool demo only"),
        ({"natural_output_tokens": "fixed:5000", "pools": "vllm"}, "two-pool demo only"),
    ],
)
def test_bad_arguments_are_named(kw: dict[str, object], says: str) -> None:
    problem = natural_problem(_args(**kw))
    assert problem is not None and says in problem
