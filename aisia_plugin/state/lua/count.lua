-- One more of a shared counter (RedisStore.count_up), atomically: a counter that did not exist
-- gets its TTL with its first count, so none ever lives without one.
-- KEYS[1] = <tag>count:<name>
-- ARGV[1] = one JSON document (scripts.count_doc): {ttl (whole seconds)}
-- Returns the count after it.
local a = cjson.decode(ARGV[1])
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], a.ttl) end
return n
