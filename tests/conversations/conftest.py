"""Conversations across the house: turns, simulated users, their matchers, reports and
comparisons.
"""
