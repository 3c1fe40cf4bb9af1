"""Learned state: bandit records, breakers, LKGP pins. memory.py is the reference store;
redis.py shares the same records between processes; records.py reads what either stored."""


def open_store(policy, *, url_later: bool = False):
    """The store the policy's ``state`` section asks for, not yet started (``await
    store.start()``). The Redis store reads its URL from the environment variable
    ``state.redis_url_env`` here, so that a missing or malformed URL fails at start-up
    (``redis.StoreConfigError``); an unreachable Redis does not (routing starts on local state).
    With `url_later`, an unset variable is left for the caller to fill (``RedisStore.use_url``)
    before it starts the store."""
    if policy.state.backend == "redis":
        from .redis import RedisStore

        return RedisStore(policy, url_later=url_later)
    from .memory import MemoryState

    return MemoryState(snapshot_path=policy.state.snapshot_path)
