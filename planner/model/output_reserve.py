"""What the router reserves for the answer, replayed on a trace (``tbr plan --output-reserve``; issue 30).

A trace records each request's true output, but the router routes on ``prompt + reserve`` before the
answer exists. Loaders set the output budget to the true output (an oracle); this module replaces it
with what the router would reserve (docs/planner.md §Output reserve):

* ``oracle``: the true output (what the planner assumed before issue 30);
* ``fixed:N``: N tokens for every request (the router's ``default_output_reserve_tokens`` when it
  does not learn; requests in these traces carry no ``max_tokens``);
* ``learned``: the router's :class:`~extproc.core.estimate.output_reserve.OutputLengthLearner`, replayed in
  arrival order from its cold priors: each request reserves its class's learned quantile (class =
  the trace's category as the model, endpoint ``chat``, reasoning off, no tools, the prompt band of
  the prompt estimate), is routed short when ``prompt estimate + reserve ≤ B``, and the learner then
  observes its answer as the router would (cut at ``B − prompt`` when the short pool truncates it).

A request routed short whose true ``prompt + output`` exceeds B is **truncated** by the short pool
(vLLM stops at ``max_model_len``): its output is cut to ``B − prompt`` tokens in the returned trace
(the pool serves that much) and counted. The reserves are computed once, at the plan's B; the
threshold sweep reuses them (the learner's truncation feedback depends on B, a second-order effect).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from extproc.config import OutputReserveConfig
from extproc.core.estimate.output_reserve import OutputClassKey, OutputLengthLearner, prompt_band_of
from planner.workload.trace import Trace

__all__ = ["OutputReserveReplay", "parse_output_reserve", "replay_output_reserve"]


@dataclass(frozen=True, slots=True)
class OutputReserveReplay:
    """What the replay did: the policy, how many requests the short pool truncated at B, α under
    the reserve and under the oracle (true prompt + true output), and the mean reserve (tokens)."""

    policy: str
    threshold_tokens: int
    truncated: int
    alpha: float
    alpha_oracle: float
    mean_reserve_tokens: float
    n: int = 0
    """Requests replayed."""

    def line(self) -> str:
        """One line for the normalisation report."""
        return (
            f"output reserve {self.policy}: mean {self.mean_reserve_tokens:,.0f} tokens, alpha {self.alpha:.3f} "
            f"at B = {self.threshold_tokens:,} (oracle {self.alpha_oracle:.3f}), {self.truncated} requests "
            f"truncated by the short pool ({self.truncated / max(1, self.n):.3%}; outputs cut to B - prompt)"
        )


def parse_output_reserve(text: str) -> tuple[str, int | None]:
    """``"oracle"``, ``"learned"`` or ``"fixed:N"`` → ``(policy, N or None)``.

    Raises:
        ValueError: anything else, or N not a positive integer.
    """
    if text in ("oracle", "learned"):
        return text, None
    if text.startswith("fixed:"):
        try:
            n = int(text.removeprefix("fixed:"))
        except ValueError:
            n = 0
        if n > 0:
            return "fixed", n
    raise ValueError(f"--output-reserve must be fixed:N (N > 0 tokens), learned or oracle, not {text!r}")


def replay_output_reserve(
    trace: Trace,
    policy: str,
    *,
    threshold_tokens: int,
    long_max_model_len_tokens: int,
    fixed_tokens: int | None = None,
    config: OutputReserveConfig | None = None,
    est_input_tokens: np.ndarray | None = None,
) -> tuple[Trace, OutputReserveReplay]:
    """The trace with ``output_budget_tokens`` = the router's reserve under ``policy`` (module
    docstring) and truncated outputs cut, with what happened.

    Args:
        trace: the loaded trace (its ``output_tokens`` are the true answers).
        policy: ``oracle``, ``fixed`` (with ``fixed_tokens``) or ``learned`` (with ``config``).
        threshold_tokens: B, the short pool's ``max_model_len``.
        long_max_model_len_tokens: the largest pool's ``max_model_len`` (caps a learned reserve).
        est_input_tokens: the router's prompt estimates, shape ``(n,)`` (None: the true prompts).

    Raises:
        ValueError: an unknown policy, or ``fixed`` without ``fixed_tokens``.
    """
    n = len(trace)
    inp = trace.input_tokens
    est = inp if est_input_tokens is None else est_input_tokens
    true_out = trace.output_tokens
    b = threshold_tokens
    if policy == "oracle":
        reserve = true_out.copy()
    elif policy == "fixed":
        if fixed_tokens is None or fixed_tokens <= 0:
            raise ValueError("policy fixed needs fixed_tokens > 0")
        reserve = np.full(n, fixed_tokens, dtype=np.int64)
    elif policy == "learned":
        reserve = _learned(
            trace, est, b, long_max_model_len_tokens, config or OutputReserveConfig(learned=True)
        )
    else:
        raise ValueError(f"unknown output reserve policy {policy!r}")
    short = (est + reserve) <= b
    truncated = short & ((inp + true_out) > b) & ((inp + reserve) <= b)
    out = np.where(truncated, np.maximum(1, b - inp), true_out).astype(np.int64)
    new = replace(trace, output_tokens=out, output_budget_tokens=reserve.astype(np.int64))
    name = policy if policy != "fixed" else f"fixed:{fixed_tokens}"
    report = OutputReserveReplay(
        policy=name,
        threshold_tokens=b,
        truncated=int(truncated.sum()),
        alpha=float(np.mean((inp + reserve) <= b)) if n else 0.0,
        alpha_oracle=float(np.mean((inp + true_out) <= b)) if n else 0.0,
        mean_reserve_tokens=float(reserve.mean()) if n else 0.0,
        n=n,
    )
    return new, report


def _learned(trace: Trace, est: np.ndarray, b: int, long_len: int, cfg: OutputReserveConfig) -> np.ndarray:
    """Per-request reserves of the learner replayed in arrival order (module docstring)."""
    learner = OutputLengthLearner(cfg)
    edges = cfg.prompt_band_edges_tokens
    n = len(trace)
    reserve = np.zeros(n, dtype=np.int64)
    inp, out, cats = trace.input_tokens.tolist(), trace.output_tokens.tolist(), trace.category_ids.tolist()
    est_l = est.tolist()
    for i in range(n):
        key = OutputClassKey(trace.categories[cats[i]], "chat", "off", False, prompt_band_of(est_l[i], edges))
        r = learner.reserve_tokens(key, max_reserve_tokens=max(1, long_len - est_l[i]))
        reserve[i] = r
        routed_short = est_l[i] + r <= b
        if routed_short and inp[i] + out[i] > b:
            learner.observe(key, max(1, b - inp[i]), truncated=True)
        else:
            learner.observe(key, out[i], truncated=False)
    return reserve
