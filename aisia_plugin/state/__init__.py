"""Learned state: bandit records, breakers, LKGP pins. memory.py is the reference store."""
