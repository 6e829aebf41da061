"""Demo summary arithmetic: misroute definitions, estimate-error join, percentiles."""

from __future__ import annotations

import pytest

from tbr.demo.replay import Outcome
from tbr.demo.summary import SummaryInputs, build_summary, format_summary
from tbr.demo.workload import DemoRequest


def _req(rid: str, max_tokens: int | None = 256, category: str = "prose") -> DemoRequest:
    return DemoRequest(
        rid, category, "test", [{"role": "user", "content": "x"}], None, False, False, max_tokens
    )


def _inputs(outcomes: list[Outcome], decisions: dict[str, dict[str, object]]) -> SummaryInputs:
    return SummaryInputs(
        outcomes=outcomes,
        decisions=decisions,
        ratios=[
            {"model": "m", "category": "latin", "mean_model_to_true_ratio": 4.4, "samples": 12, "warm": True}
        ],
        envoy_stats={
            "http.llm_ingress.ext_proc.tbr.streams_started": 5,
            "http.llm_ingress.ext_proc.tbr.failure_mode_allowed": 1,
        },
        short_max_model_len=8192,
        long_max_model_len=65536,
        default_output_reserve_tokens=1024,
        data_source="test",
        builtin=False,
        elapsed_s=2.0,
        concurrency=2,
    )


@pytest.mark.parametrize(
    ("outcome", "field"),
    [
        # short pool refused it: harmful
        pytest.param(
            Outcome(_req("a"), 400, "short", None, None, 0.1, "BadRequestError"),
            "harmful_misroutes",
            id="harmful",
        ),
        # long pool served 7000 + 256 ≤ 8192: wasteful
        pytest.param(Outcome(_req("b"), 200, "long", 7000, 16, 0.1), "wasteful_misroutes", id="wasteful"),
        # no max_tokens: reserve = router default 1024; 7000 + 1024 ≤ 8192: wasteful
        pytest.param(
            Outcome(_req("c", None), 200, "long", 7000, 16, 0.1),
            "wasteful_misroutes",
            id="wasteful-default-reserve",
        ),
        # long pool refused it too: over every limit
        pytest.param(
            Outcome(_req("d"), 400, "long", None, None, 0.1, "BadRequestError"),
            "over_every_pool_limit",
            id="over-all",
        ),
        # nobody answered
        pytest.param(
            Outcome(_req("e"), 0, None, None, None, 0.1, "APIConnectionError"), "failed_requests", id="failed"
        ),
    ],
)
def test_outcome_classification(outcome: Outcome, field: str) -> None:
    s = build_summary(_inputs([outcome], {}))
    counted = ("harmful_misroutes", "wasteful_misroutes", "over_every_pool_limit", "failed_requests")
    assert {f: s[f] for f in counted} == {f: int(f == field) for f in counted}


def test_not_wasteful_when_it_did_not_fit_short() -> None:
    # 7500 + 1024 (default reserve) > 8192: the long pool was right.
    s = build_summary(_inputs([Outcome(_req("f", None), 200, "long", 7500, 16, 0.1)], {}))
    assert s["wasteful_misroutes"] == 0


def test_estimate_error_joins_decision_log() -> None:
    outcomes = [Outcome(_req(f"r{i}"), 200, "short", 100, 16, 0.1) for i in range(4)]
    decisions = {
        f"r{i}": {"request_id": f"r{i}", "estimated_prompt_tokens": est}
        for i, est in enumerate((90, 100, 110, 150))
    }
    s = build_summary(_inputs(outcomes, decisions))
    assert s["estimate_error_samples"] == 4
    assert s["under_estimates"] == 1
    assert s["estimate_error_pct"]["min"] == -10.0 and s["estimate_error_pct"]["max"] == 50.0
    assert s["estimate_error_pct"]["p50"] == 5.0
    assert s["decisions_logged"] == 4
    assert s["requests_per_pool"] == {"short": 4}
    assert s["envoy_ext_proc"]["failure_mode_allowed"] == 1
    text = format_summary(s)
    assert "harmful misroutes" in text and "latin" in text


def test_routing_vs_truth_matrix() -> None:
    outcomes = [
        Outcome(_req("s-ok", 256), 200, "short", 5000, 16, 0.1),  # 5256 fits, short: right
        Outcome(_req("l-waste", 256), 200, "long", 6000, 16, 0.1),  # 6256 fits, long: wasteful
        Outcome(_req("l-ok", 4096), 200, "long", 6000, 16, 0.1),  # 10096 needs long: right
        Outcome(_req("s-bad", 4096), 400, "short", None, None, 0.1, "BadRequestError"),  # harmful
    ]
    s = build_summary(_inputs(outcomes, {}))
    assert s["routing_vs_truth"] == {
        "fits_short_sent_short": 1,
        "fits_short_sent_long": 1,
        "needs_long_sent_long": 1,
        "needs_long_sent_short_accepted": 0,
        "needs_long_sent_short_refused": 1,
    }
    assert s["near_boundary_requests"] == 3  # 5256, 6256, 10096 are within ×2 of 8192
    assert [d["request_id"] for d in s["wasteful_detail"]] == ["l-waste"]


def test_misroute_recovered_by_envoy_retry_is_still_harmful() -> None:
    """Routed short, refused there, retried on long by Envoy: the client got a 200, the decision
    was harmful (the decision log's ``retried_to_pool`` says so), and the demo must fail on it."""
    o = Outcome(_req("r"), 200, "long", 9000, 16, 0.1)
    s = build_summary(_inputs([o], {"r": {"request_id": "r", "pool": "short", "retried_to_pool": "long"}}))
    assert (s["harmful_misroutes"], s["harmful_recovered_by_retry"], s["harmful_refused_to_client"]) == (
        1,
        1,
        0,
    )
    assert "1 recovered by Envoy's retry" in format_summary(s)


def test_truncated_answers_are_counted_from_the_decision_log() -> None:
    """An answer the short pool cut at its max_model_len (decision log ``truncated: true``) is a
    truncated misroute; one the client's max_tokens cut (``truncated: false``) is not."""
    outcomes = [
        Outcome(_req("cut", None), 200, "short", 3900, 4292, 0.1),
        Outcome(_req("client", 256), 200, "short", 3900, 256, 0.1),
    ]
    decisions: dict[str, dict[str, object]] = {
        "cut": {"request_id": "cut", "pool": "short", "truncated": True, "finish_reason": "length"},
        "client": {"request_id": "client", "pool": "short", "truncated": False, "finish_reason": "length"},
    }
    s = build_summary(_inputs(outcomes, decisions))
    assert (s["truncated_misroutes"], s["truncated_request_ids"]) == (1, ["cut"])
    assert "truncated misroutes (answer cut at the serving pool's max_model_len" in format_summary(s)
    assert s["harmful_misroutes"] == 0


def test_the_routers_own_reserve_from_the_decision_log_defines_wasteful() -> None:
    """With a learned reserve the router budgets neither max_tokens nor the default: 7000 + its
    logged 2,000-token reserve does not fit 8192, so the long pool was right, not wasteful."""
    o = Outcome(_req("w", None), 200, "long", 7000, 16, 0.1)
    rec = {"request_id": "w", "pool": "long", "output_reserve_tokens": 2000, "n_sequences": 1}
    assert build_summary(_inputs([o], {"w": rec}))["wasteful_misroutes"] == 0
    rec["output_reserve_tokens"] = 500  # 7000 + 500 fits: wasteful
    assert build_summary(_inputs([o], {"w": rec}))["wasteful_misroutes"] == 1
