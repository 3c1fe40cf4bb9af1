-- Re-seed a store that has no epoch (a new Redis, or one restarted without persistence) from a
-- replica's local copy, unless another replica did it first. A record already present is kept.
-- KEYS[1] = <tag>epoch
-- ARGV: tag, new epoch, bandit_ttl, breaker_ttl, tick, then counted sections:
--   n_applied, (process, seq)...; n_lkgp, (alias, deployment)...;
--   n_arms, (deployment, domain or '', 9 arm fields)...; n_cbs, (deployment, 8 breaker fields)...;
--   n_paces, (alias, 5 pacing fields)...; n_quality, (deployment, domain or '', 6 quality fields)...
local tag = ARGV[1]
local current = redis.call('GET', KEYS[1])
if current then return {'exists', current} end
local bandit_ttl, breaker_ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local i = 6
local function section()
  local count = tonumber(ARGV[i]); i = i + 1
  return count
end
local function member(set, value)
  redis.call('SADD', tag .. set, value)
  redis.call('EXPIRE', tag .. set, bandit_ttl)
end
for _ = 1, section() do
  local proc, seq = ARGV[i], tonumber(ARGV[i + 1]); i = i + 2
  if tonumber(redis.call('HGET', tag .. 'applied', proc) or '0') < seq then
    redis.call('HSET', tag .. 'applied', proc, ARGV[i - 1])
  end
  redis.call('EXPIRE', tag .. 'applied', bandit_ttl)
  redis.call('ZADD', tag .. 'applied_seen', 'NX', redis.call('TIME')[1], proc)
  redis.call('EXPIRE', tag .. 'applied_seen', bandit_ttl)
end
for _ = 1, section() do
  redis.call('HSETNX', tag .. 'lkgp', ARGV[i], ARGV[i + 1]); i = i + 2
  redis.call('EXPIRE', tag .. 'lkgp', bandit_ttl)
end
-- A record from ARGV[first ..] unless the key holds one already.
local function keep_or_write(key, fields, first, ttl)
  if redis.call('EXISTS', key) == 0 then
    local args = {}
    for k, f in ipairs(fields) do args[#args + 1] = f; args[#args + 1] = ARGV[first + k - 1] end
    redis.call('HSET', key, unpack(args))
    redis.call('EXPIRE', key, ttl)
  end
end
for _ = 1, section() do
  local dep, dom = ARGV[i], ARGV[i + 1]
  local key = tag .. 'bandit:' .. dep
  if dom ~= '' then key = key .. ':' .. dom; member('domains', dom) end
  keep_or_write(key, ARM, i + 2, bandit_ttl)
  member('deployments', dep)
  i = i + 2 + #ARM
end
-- A section of (name, fields...) records kept at <tag><kind>:<name>, each name added to <set>.
local function named_records(kind, fields, set, ttl)
  for _ = 1, section() do
    local name = ARGV[i]
    keep_or_write(tag .. kind .. ':' .. name, fields, i + 1, ttl)
    member(set, name)
    i = i + 1 + #fields
  end
end
named_records('cb', CB, 'deployments', breaker_ttl)
named_records('pace', PACE, 'paced', bandit_ttl)
-- Quality evidence (q_* fields beside the arm's), each field kept when the hash holds it already.
for _ = 1, section() do
  local dep, dom = ARGV[i], ARGV[i + 1]
  local key = tag .. 'bandit:' .. dep
  if dom ~= '' then key = key .. ':' .. dom; member('domains', dom) end
  for k, f in ipairs(QUALITY) do redis.call('HSETNX', key, 'q_' .. f, ARGV[i + 1 + k]) end
  redis.call('EXPIRE', key, bandit_ttl)
  member('deployments', dep)
  i = i + 2 + #QUALITY
end
if num(redis.call('GET', tag .. 'tick'), 0) < tonumber(ARGV[5]) then
  redis.call('SET', tag .. 'tick', ARGV[5], 'EX', bandit_ttl)
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('INCR', tag .. 'version')
return {'seeded', ARGV[2]}
