"""``tbr config check PATH``: validate a router configuration file and print a summary."""

from __future__ import annotations

import argparse
import os
import sys

from extproc.config import ConfigError, RouterConfig
from extproc.service.overrides import env_overrides, load_config_with_overrides, redis_password


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tbr config``."""
    p = subparsers.add_parser("config", help="configuration tools")
    sub = p.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="validate a configuration file")
    check.add_argument("path", help="YAML configuration file")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Validate ``args.path`` as ``tbr serve`` would load it (the ``TBR_*`` environment applied, a
    password in ``calibration.redis_url`` rejected, ``TBR_REDIS_PASSWORD_FILE`` read); exit 0 when
    valid, 2 with the errors on stderr otherwise."""
    try:
        cfg = load_config_with_overrides(args.path, env_overrides(os.environ))
        redis_password(os.environ)
    except ConfigError as exc:
        print(f"{args.path}: {exc}", file=sys.stderr)
        return 2
    by_name = {p.name: p for p in cfg.pools}
    sets = []
    for set_name, names in cfg.pool_groups.items():
        members = sorted((by_name[n] for n in names), key=lambda p: p.max_model_len)
        pools = ", ".join(
            f"{p.name} (max_model_len {p.max_model_len}, {cfg.routing_header}: {p.header_value})"
            for p in members
        )
        sets.append(pools if not cfg.models else f"[{set_name}] {pools}")
    label = "pools" if not cfg.models else "model sets"
    print(f"{args.path}: OK; {label}: {'; '.join(sets)}; fallback: {cfg.fallback_pool.name}")
    for warning in config_warnings(cfg):
        print(f"{args.path}: warning: {warning}", file=sys.stderr)
    return 0


def config_warnings(cfg: RouterConfig) -> list[str]:
    """Settings that validate but cannot work as intended (printed, not fatal)."""
    out: list[str] = []
    largest = cfg.fallback_pool.max_model_len
    reserve = cfg.estimator.default_output_reserve_tokens
    if reserve >= largest:
        out.append(
            f"estimator.default_output_reserve_tokens ({reserve}) is not below the largest pool's max_model_len"
            f" ({largest}): every request without max_tokens exceeds all pools"
        )
    smallest = cfg.pools_by_size[0].max_model_len
    if len(cfg.pools) > 1 and reserve >= smallest:
        out.append(
            f"estimator.default_output_reserve_tokens ({reserve}) is not below the smallest pool's max_model_len"
            f" ({smallest}): requests without max_tokens never go to that pool"
        )
    out.extend(pool_set_warnings(cfg))
    if len(cfg.pools) == 2 and not cfg.models and cfg.fallback_pool.name != "long":
        out.append(
            f"the largest pool is {cfg.fallback_pool.name!r}, not 'long': Envoy's catch-all route (fail-open,"
            f" unreadable requests) in envoy/envoy.yaml goes to long_pool, so make it the largest pool"
        )
    return out


def pool_set_warnings(cfg: RouterConfig) -> list[str]:
    """Pool sets that validate but route nothing by budget, or are listed out of order."""
    out: list[str] = []
    by_name = {p.name: p for p in cfg.pools}
    many = len(cfg.pools) > 1
    for set_name, names in cfg.pool_groups.items():
        where = "pools" if not cfg.models else f"models[{set_name}]"
        if len(names) == 1 and many:
            out.append(f"{where} has a single pool ({names[0]}): its requests are never routed by budget")
        lens = [by_name[n].max_model_len for n in names]
        if lens != sorted(lens):
            order = ", ".join(f"{n} ({by_name[n].max_model_len})" for n in names)
            out.append(
                f"{where} are not listed in increasing max_model_len ({order}): the router sorts them, "
                "but check that Envoy's retry goes from each pool to the next larger one"
            )
    if cfg.models and cfg.default_model_set is None:
        out.append(
            f"no default_model_set: a model no set serves goes to the largest pool of all "
            f"({cfg.pools_by_size[-1].name}), which may not serve it"
        )
    return out
