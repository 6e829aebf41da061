"""Workloads: the request trace type, its loaders (CSV, JSONL, decision logs, length CDFs), CDF-drawn
request sources and daily/burst shapes built from a trace.
"""
