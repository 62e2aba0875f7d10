"""Serving: what inference deployments deliver per GPU, from their own metrics, and a capacity
planner that sizes replicas from measured throughput. See docs/architecture.md, "Serving".
"""
