-- The deployments' recent calls by API key, for the peers' check before a failure counts
-- (blame.outlier_verdict, docs/failures.md), shared by every process (RedisStore.exchange_peers):
-- one sorted set per deployment, members '<process>:<seq>|<key hash>|<1 success, 0 failure>'
-- scored by the store's clock, none older than the window, at most max_calls kept.
-- KEYS[1] = <tag>peers (the set of the deployments that have recent calls), then
-- KEYS[i] = <tag>peers:<deployment>, i > 1
-- ARGV[1] = one JSON document (scripts.peers_doc): {now, window (seconds), max_calls, ttl (whole
--   seconds), calls = [{key_index (into KEYS), member, score}, ...] to add}.
-- Returns, per KEYS[i] (i > 1), the window's calls by key: a list of name/value pairs each
-- (scripts.PeerEntry): caller (the key hash), calls, successes.
local a = cjson.decode(ARGV[1])
local now, window, keep, ttl = a.now, a.window, a.max_calls, a.ttl
for _, c in ipairs(a.calls) do
  redis.call('ZADD', KEYS[c.key_index], c.score, c.member)
end
local out = {}
for i = 2, #KEYS do
  local k = KEYS[i]
  redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. tostring(now - window))
  redis.call('ZREMRANGEBYRANK', k, 0, -keep - 1)
  local entries = {}
  if redis.call('EXISTS', k) == 0 then
    redis.call('SREM', KEYS[1], k)
  else
    redis.call('SADD', KEYS[1], k)
    redis.call('EXPIRE', k, ttl)
    local calls, successes, order = {}, {}, {}
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', k, now - window, '+inf')) do
      local caller, ok = string.match(m, '^[^|]*|(.*)|([01])$')
      if caller then
        if calls[caller] == nil then
          calls[caller], successes[caller] = 0, 0
          order[#order + 1] = caller
        end
        calls[caller] = calls[caller] + 1
        if ok == '1' then successes[caller] = successes[caller] + 1 end
      end
    end
    for _, caller in ipairs(order) do
      entries[#entries + 1] = {'caller', caller, 'calls', calls[caller], 'successes', successes[caller]}
    end
  end
  out[i - 1] = entries
end
return out
