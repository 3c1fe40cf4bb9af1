-- Take a half-open probe slot (CircuitBreaker.reserve), atomically across every replica.
-- KEYS[1] = <tag>cb:<deployment>
-- ARGV: tag, deployment, now, timeout, max_calls, lease, breaker_ttl
-- Returns {allowed (1|0), the breaker's 8 fields as stored after it}.
local tag, dep, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cfg = {timeout = tonumber(ARGV[4]), max_calls = tonumber(ARGV[5]), lease = tonumber(ARGV[6])}
local s = read_cb(KEYS[1])
local allowed, n = reserve(cfg, s, now)
if n ~= s then
  write(KEYS[1], CB, n, tonumber(ARGV[7]))
  redis.call('SADD', tag .. 'deployments', dep)
  redis.call('INCR', tag .. 'version')
end
local out = {allowed and 1 or 0}
for _, f in ipairs(CB) do
  local v = n[f]
  out[#out + 1] = type(v) == 'number' and fmt(v) or v
end
return out
