-- Re-seed a store that has no epoch (a new Redis, or one restarted without persistence) from a
-- replica's local copy, unless another replica did it first. A record already present is kept.
-- KEYS[1] = <tag>epoch
-- ARGV[1] = one JSON document (scripts.seed_doc):
--   {tag, epoch (the new one), bandit_ttl, breaker_ttl, tick (text),
--    applied = [{process, seq (text)}], lkgp = [{alias, deployment}],
--    arms = [{deployment, domain ('' global), fields = {ARM field = text}}],
--    breakers = [{deployment, fields = {CB field = text}}], paces = [{alias, fields = {PACE field = text}}],
--    quality = [{deployment, domain ('' global), fields = {QUALITY field = text}}]}
-- Returns name/value pairs (scripts.SeedReply): status ('seeded' | 'exists'), epoch.
local a = cjson.decode(ARGV[1])
local tag = a.tag
local current = redis.call('GET', KEYS[1])
if current then return {'status', 'exists', 'epoch', current} end
local bandit_ttl, breaker_ttl = a.bandit_ttl, a.breaker_ttl
local function member(set, value)
  redis.call('SADD', tag .. set, value)
  redis.call('EXPIRE', tag .. set, bandit_ttl)
end
for _, r in ipairs(a.applied) do
  local proc, seq = r.process, tonumber(r.seq)
  if tonumber(redis.call('HGET', tag .. 'applied', proc) or '0') < seq then
    redis.call('HSET', tag .. 'applied', proc, r.seq)
  end
  redis.call('EXPIRE', tag .. 'applied', bandit_ttl)
  redis.call('ZADD', tag .. 'applied_seen', 'NX', redis.call('TIME')[1], proc)
  redis.call('EXPIRE', tag .. 'applied_seen', bandit_ttl)
end
for _, r in ipairs(a.lkgp) do
  redis.call('HSETNX', tag .. 'lkgp', r.alias, r.deployment)
  redis.call('EXPIRE', tag .. 'lkgp', bandit_ttl)
end
-- A record's fields (text, in the order of `fields`) unless the key holds one already.
local function keep_or_write(key, fields, values, ttl)
  if redis.call('EXISTS', key) == 0 then
    local args = {}
    for _, f in ipairs(fields) do args[#args + 1] = f; args[#args + 1] = values[f] end
    redis.call('HSET', key, unpack(args))
    redis.call('EXPIRE', key, ttl)
  end
end
-- The key of a deployment's arm (its domain's, when one), the domain noted.
local function arm_key(r)
  local key = tag .. 'bandit:' .. r.deployment
  if r.domain ~= '' then key = key .. ':' .. r.domain; member('domains', r.domain) end
  return key
end
for _, r in ipairs(a.arms) do
  keep_or_write(arm_key(r), ARM, r.fields, bandit_ttl)
  member('deployments', r.deployment)
end
for _, r in ipairs(a.breakers) do
  keep_or_write(tag .. 'cb:' .. r.deployment, CB, r.fields, breaker_ttl)
  member('deployments', r.deployment)
end
for _, r in ipairs(a.paces) do
  keep_or_write(tag .. 'pace:' .. r.alias, PACE, r.fields, bandit_ttl)
  member('paced', r.alias)
end
-- Quality evidence (q_* fields beside the arm's), each field kept when the hash holds it already.
for _, r in ipairs(a.quality) do
  local key = arm_key(r)
  for _, f in ipairs(QUALITY) do redis.call('HSETNX', key, 'q_' .. f, r.fields[f]) end
  redis.call('EXPIRE', key, bandit_ttl)
  member('deployments', r.deployment)
end
if num(redis.call('GET', tag .. 'tick'), 0) < tonumber(a.tick) then
  redis.call('SET', tag .. 'tick', a.tick, 'EX', bandit_ttl)
end
redis.call('SET', KEYS[1], a.epoch)
redis.call('INCR', tag .. 'version')
return {'status', 'seeded', 'epoch', a.epoch}
