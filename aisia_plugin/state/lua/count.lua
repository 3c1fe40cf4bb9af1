-- One more of a shared counter (RedisStore.count_up), atomically: a counter that did not exist
-- gets its TTL with its first count, so none ever lives without one.
-- KEYS[1] = <tag>count:<name>
-- ARGV: ttl in whole seconds
-- Returns the count after it.
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return n
