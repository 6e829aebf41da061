"""Online calibration of the model-to-true ratio per key (arXiv 2604.09613, docs/method.md §3.3;
extended).

The learned quantity is the **model-to-true ratio**: modelled units of a request's text ÷ its true
prompt tokens. The router's modelled units are the run model's tokens
(:mod:`extproc.core.text.run_costs`), so the ratio is near 1 (0.95 for English on Llama-3: the model
budgets 5 % fewer tokens than the tokenizer counts); the evaluation's ``bytes`` baseline learns UTF-8
bytes with the same learners, and its ratio is the paper's bytes per token (≈ 4 for English). The estimate divides
the modelled units by the ratio: ``tokens = modelled / ĉ``.

On each response with ``usage.prompt_tokens`` the router observes
``c_obs = modelled units / true text tokens`` for the request's (model, category) key, with a weight
``w ∈ (0, 1]`` (the estimator gives small requests less weight, see docs/estimator.md), and updates

* ``ĉ ← ĉ + (1 − β) w (c_obs − ĉ)`` (EMA of the ratio; the paper's ``βĉ + (1 − β)c_obs`` when w = 1),
* ``σ̂ ← σ̂ + (1 − β) w (|c_obs − ĉ_prev| − σ̂)`` (EMA of the absolute deviation, against the
  pre-update mean), and
* ``q ← q + η w (α − 1[log(c_obs/ĉ_prev) < q])``: a stochastic-gradient (pinball-loss) tracker of
  the α-quantile of the log residual ``log(c_obs/ĉ)``, weighted by w. The conservative ratio is
  ``c_low = ĉ · exp(q)`` and is stored as ``low_ratio``.

The paper routes with ``c* = ĉ − γσ̂``; the ``quantile`` learner routes with ``c_low`` (the
authors' code [C1] also tracks a lower quantile, with an asymmetric EMA). Both are kept in the
same state so either can be chosen at routing time. The first observation initialises
``ĉ = c_obs``, ``σ̂ = c_obs · initial_rel_dev`` and ``q = log(1 − initial_margin)``.

:class:`RatioStore` is the interface the request path uses; it is synchronous and in-memory
(a shared store keeps a local copy and syncs in the background). Every ratio here is a
model-to-true ratio (modelled units per true prompt token).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol

from extproc.config import CalibrationConfig

__all__ = [
    "INITIAL_REL_DEV",
    "InMemoryRatioStore",
    "LearnerParams",
    "RatioKey",
    "RatioState",
    "RatioStore",
    "decode_snapshot",
    "ema_update",
    "encode_snapshot",
    "learn",
]

INITIAL_REL_DEV = 0.1
"""σ̂ after the first observation, as a fraction of it (no deviation is known yet)."""

RatioKey = tuple[str, str]
"""(model key, category)."""


@dataclass(frozen=True, slots=True)
class RatioState:
    """Learned model-to-true ratio of one key (modelled units per true prompt token; module
    docstring).

    Attributes:
        mean_ratio: EMA mean ĉ.
        dev_ratio: EMA absolute deviation σ̂.
        samples: observations folded in.
        low_ratio: the tracked lower-quantile ratio ``ĉ·exp(q)``; 0.0 when never learned (a state
            written by the plain :func:`ema_update`).
    """

    mean_ratio: float
    dev_ratio: float
    samples: int
    low_ratio: float = 0.0


@dataclass(frozen=True, slots=True)
class LearnerParams:
    """Parameters of :func:`learn` (defaults chosen by ``tbr eval-estimator``, docs/estimator.md).

    Attributes:
        beta: EMA decay β of ĉ and σ̂, in [0, 1).
        quantile: α, the lower quantile of ``c_obs/ĉ`` tracked, in (0, 0.5].
        quantile_step: η, the SGD step of the log-residual quantile (per unit weight).
        initial_margin: ``1 − c_low/ĉ`` right after the first observation, in [0, 1).
        initial_rel_dev: σ̂ / c_obs right after the first observation.
    """

    beta: float = 0.99
    quantile: float = 0.05
    quantile_step: float = 0.02
    initial_margin: float = 0.15
    initial_rel_dev: float = INITIAL_REL_DEV


def learn(state: RatioState | None, c_obs: float, params: LearnerParams, weight: float = 1.0) -> RatioState:
    """Fold one weighted observation into a ratio state (formulas in the module docstring).

    Args:
        state: the current state, or None for a key never observed.
        c_obs: observed model-to-true ratio (> 0, finite).
        params: learner parameters.
        weight: observation weight in (0, 1]; values outside are clamped.

    Raises:
        ValueError: ``c_obs`` is not a positive finite number.
    """
    if not (c_obs > 0.0 and math.isfinite(c_obs)):
        raise ValueError(f"c_obs must be positive and finite, got {c_obs!r}")
    w = min(1.0, max(weight, 1e-6)) if math.isfinite(weight) else 1.0
    if state is None or state.samples == 0:
        low = c_obs * (1.0 - params.initial_margin)
        return RatioState(c_obs, c_obs * params.initial_rel_dev, 1, low)
    mean0 = state.mean_ratio
    step = (1.0 - params.beta) * w
    mean = mean0 + step * (c_obs - mean0)
    dev = state.dev_ratio + step * (abs(c_obs - mean0) - state.dev_ratio)
    has_low = state.low_ratio > 0.0
    q = math.log(state.low_ratio / mean0) if has_low else math.log(1.0 - params.initial_margin)
    below = 1.0 if math.log(c_obs / mean0) < q else 0.0
    q += params.quantile_step * w * (params.quantile - below)
    q = min(q, 0.0)  # the conservative ratio never exceeds the mean
    return RatioState(mean, dev, state.samples + 1, mean * math.exp(q))


def ema_update(state: RatioState | None, c_obs: float, beta: float) -> RatioState:
    """The paper's plain EMA step (mean ĉ and deviation σ̂ only): :func:`learn` with weight 1 and
    its quantile tracker left out.

    Args:
        state: the current state, or None for a key never observed.
        c_obs: observed model-to-true ratio (> 0, finite).
        beta: EMA decay β in [0, 1).

    Raises:
        ValueError: ``c_obs`` is not a positive finite number.
    """
    s = learn(state, c_obs, LearnerParams(beta=beta))
    return RatioState(s.mean_ratio, s.dev_ratio, s.samples)


class RatioStore(Protocol):
    """Where learned ratios live. Implementations must be cheap to read on the request path."""

    def get(self, key: RatioKey) -> RatioState | None:
        """The current state of ``key``, or None when never observed."""
        ...

    def observe(self, key: RatioKey, c_obs: float, weight: float = 1.0) -> RatioState:
        """Fold one observation (with weight in (0, 1]) in and return the new state."""
        ...

    def items(self) -> list[tuple[RatioKey, RatioState]]:
        """Every key with its state (admin view, metrics, snapshots)."""
        ...


class InMemoryRatioStore:
    """Process-local :class:`RatioStore` (snapshots: :func:`encode_snapshot`, :mod:`extproc.service.snapshot`).

    Args:
        beta: EMA decay β.
        params: the other learner parameters (β is taken from ``beta``); defaults when None.
    """

    def __init__(self, *, beta: float, params: LearnerParams | None = None) -> None:
        self.beta = beta
        base = params if params is not None else LearnerParams()
        self.params = LearnerParams(
            beta=beta,
            quantile=base.quantile,
            quantile_step=base.quantile_step,
            initial_margin=base.initial_margin,
            initial_rel_dev=base.initial_rel_dev,
        )
        self._states: dict[RatioKey, RatioState] = {}

    @classmethod
    def from_config(cls, cal: CalibrationConfig) -> InMemoryRatioStore:
        """A store applying the learner parameters of a :class:`~extproc.config.CalibrationConfig`."""
        params = LearnerParams(
            beta=cal.ema_beta,
            quantile=cal.quantile,
            quantile_step=cal.quantile_step,
            initial_margin=cal.initial_margin,
        )
        return cls(beta=cal.ema_beta, params=params)

    def get(self, key: RatioKey) -> RatioState | None:
        """See :meth:`RatioStore.get`."""
        return self._states.get(key)

    def observe(self, key: RatioKey, c_obs: float, weight: float = 1.0) -> RatioState:
        """See :meth:`RatioStore.observe`."""
        new = learn(self._states.get(key), c_obs, self.params, weight)
        self._states[key] = new
        return new

    def put(self, key: RatioKey, state: RatioState) -> None:
        """Replace the state of ``key`` (used when syncing from a shared store)."""
        self._states[key] = state

    def items(self) -> list[tuple[RatioKey, RatioState]]:
        """See :meth:`RatioStore.items`."""
        return list(self._states.items())

    def restore(self, states: dict[RatioKey, RatioState]) -> int:
        """Replace the states of the given keys (a snapshot being restored); returns how many."""
        self._states.update(states)
        return len(states)


SNAPSHOT_VERSION = 2
"""Version of the snapshot document written by :func:`encode_snapshot` (1: the same rows under the
names ``mean_bpt``, ``dev_bpt``, ``low_bpt``, from before the learned ratio was named for what it
is; still read)."""

_V1_NAMES = {"mean_ratio": "mean_bpt", "dev_ratio": "dev_bpt", "low_ratio": "low_bpt"}
"""Field of :class:`RatioState` → its name in a version-1 snapshot."""


def encode_snapshot(items: list[tuple[RatioKey, RatioState]]) -> dict[str, object]:
    """The JSON document of a ratio snapshot: ``{"version": 2, "ratios": [{model, category,
    mean_ratio, dev_ratio, samples, low_ratio, mean_bpt, dev_bpt, low_bpt}, ...]}``, rows sorted by
    key. The version-1 names repeat the same values for one release, so that a router rolled back
    to the release before reads the file this one wrote (docs/operations.md)."""
    rows = []
    for k, s in sorted(items):
        row: dict[str, object] = {"model": k[0], "category": k[1], **asdict(s)}
        row.update({old: row[new] for new, old in _V1_NAMES.items()})
        rows.append(row)
    return {"version": SNAPSHOT_VERSION, "ratios": rows}


def _field(row: dict[str, object], name: str) -> object:
    """``row[name]``, else its version-1 name's value (a snapshot written before version 2)."""
    return row[name] if name in row else row[_V1_NAMES[name]]


def decode_snapshot(data: object) -> dict[RatioKey, RatioState]:
    """States from a document written by :func:`encode_snapshot`, of this version or version 1
    (``mean_bpt``, ``dev_bpt``, ``low_bpt``: the same values under their old names).

    Raises:
        ValueError: not a snapshot document, or a state with a non-positive or non-finite ratio
            (then nothing may be restored from it).
    """
    try:
        rows = data["ratios"]  # type: ignore[index]
        states = {
            (str(r["model"]), str(r["category"])): RatioState(
                float(_field(r, "mean_ratio")),  # type: ignore[arg-type]
                float(_field(r, "dev_ratio")),  # type: ignore[arg-type]
                int(r["samples"]),
                float(r.get("low_ratio", r.get("low_bpt", 0.0))),
            )
            for r in rows
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a ratio snapshot: {exc!r}") from exc
    for state in states.values():
        ok = state.mean_ratio > 0 and math.isfinite(state.mean_ratio) and state.dev_ratio >= 0
        if not (ok and 0.0 <= state.low_ratio <= state.mean_ratio):
            raise ValueError("not a ratio snapshot: non-positive ratio")
    return states
