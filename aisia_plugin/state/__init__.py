"""Learned state: bandit records, breakers, LKGP pins. memory.py is the reference store."""


def open_store(policy):
    """The store the policy's ``state`` section asks for, not yet started (``await
    store.start()``). Only the memory store exists so far."""
    from .memory import MemoryState

    return MemoryState()
