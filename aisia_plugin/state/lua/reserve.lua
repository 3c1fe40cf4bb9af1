-- Take a half-open probe slot (CircuitBreaker.reserve), atomically across every replica.
-- KEYS[1] = <tag>cb:<deployment>
-- ARGV[1] = one JSON document (scripts.reserve_doc): {tag, deployment, now, timeout, max_calls, lease,
--   breaker_ttl}
-- Returns name/value pairs (scripts.ReserveReply): granted (1|0), breaker (its CB fields as stored after it).
local a = cjson.decode(ARGV[1])
local tag, dep, now = a.tag, a.deployment, a.now
local cfg = {timeout = a.timeout, max_calls = a.max_calls, lease = a.lease}
local s = read_cb(KEYS[1])
local allowed, n = reserve(cfg, s, now)
if n ~= s then
  write(KEYS[1], CB, n, a.breaker_ttl)
  redis.call('SADD', tag .. 'deployments', dep)
  redis.call('INCR', tag .. 'version')
end
local fields = {}
for _, f in ipairs(CB) do
  local v = n[f]
  fields[#fields + 1] = f
  fields[#fields + 1] = type(v) == 'number' and fmt(v) or v
end
return {'granted', allowed and 1 or 0, 'breaker', fields}
