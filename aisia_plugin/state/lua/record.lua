-- Apply one batch of outcomes (and resets) atomically: learning.apply_outcome step by step for
-- each, in order, against the shared tick. Exactly once per batch: the batch's sequence number
-- must exceed the last one applied for its process (a batch re-sent after a lost reply is
-- skipped). Refused when the store's epoch is not the client's (Redis came back empty: the
-- client re-seeds it first).
-- KEYS[1] = <tag>tick
-- ARGV[1] = one JSON document (scripts.record_doc builds it):
--   {tag, epoch, process, seq, bandit_ttl, breaker_ttl,
--    breaker = {threshold, timeout, max_calls, cooldown, max_retry, lease},
--    learn = {gamma, ema, threshold (the success threshold), quality_gamma (the quality evidence's forgetting)},
--    fresh = {the ARM fields: the arm a first outcome starts from},
--    pace_rules = {alias = {target, rate, max, min}} (the spend targets: pacing.PaceRule),
--    ops = [op, ...] in order, each one of
--      {op = 'outcome', deployment, now, kind ('' success | provider | client | rate_limit), reward,
--       latency|null, alias|null, domain|null, retry_after|null, pace_alias|null, cost|null}
--      {op = 'reset', deployment}
--      {op = 'quality', deployment, value, weight, source, domain|null} (quality evidence: quality.py)}
-- Returns name/value pairs (scripts.RecordReply): status ('ok' | 'dup' | 'epoch') and version, tick, epoch.
local a = cjson.decode(ARGV[1])
local tag = a.tag
local epoch = redis.call('GET', tag .. 'epoch')
if epoch ~= a.epoch then return {'status', 'epoch', 'epoch', epoch or ''} end
local process, seq = a.process, a.seq
local version = redis.call('GET', tag .. 'version') or '0'
local last = tonumber(redis.call('HGET', tag .. 'applied', process) or '0')
if seq <= last then return {'status', 'dup', 'version', version} end
local bandit_ttl, breaker_ttl = a.bandit_ttl, a.breaker_ttl
local cfg, learn, fresh, pace_rules, ops = a.breaker, a.learn, a.fresh, a.pace_rules, a.ops
local function opt(v)
  if v == cjson.null then return nil end
  return v
end

local tick = num(redis.call('GET', tag .. 'tick'), 0)
-- Records read once and written once per batch: key -> record, or false when absent.
local arms, cbs, dirty_arms, dirty_cbs, lkgp = {}, {}, {}, {}, {}
local deployments, domains = {}, {}
local paces = {}  -- paced alias -> its record, read once and written once per batch

local function arm(key)
  local s = arms[key]
  if s == nil then
    s = read_arm(key) or false
    arms[key] = s
  end
  return s
end

-- Quality records (in the arm's hash, q_* fields), read once and written once per batch.
local quals, dirty_quals = {}, {}
local function qual(key)
  local q = quals[key]
  if q == nil or q == false then
    q = read_quality(key)
    quals[key] = q
  end
  return q
end

local function cb(dep)
  local s = cbs[dep]
  if s == nil then
    s = read_cb(tag .. 'cb:' .. dep)
    cbs[dep] = s
  end
  return s
end

for _, o in ipairs(ops) do
  local op, dep = o.op, o.deployment
  if op == 'reset' then
    local keys = {tag .. 'bandit:' .. dep, tag .. 'cb:' .. dep}
    local known = {}
    for _, dom in ipairs(redis.call('SMEMBERS', tag .. 'domains')) do known[dom] = true end
    for dom in pairs(domains) do known[dom] = true end  -- first recorded in this very batch
    for dom in pairs(known) do keys[#keys + 1] = tag .. 'bandit:' .. dep .. ':' .. dom end
    redis.call('DEL', unpack(keys))
    for _, key in ipairs(keys) do
      arms[key], dirty_arms[key] = false, nil
      quals[key], dirty_quals[key] = nil, nil
    end
    cbs[dep], dirty_cbs[dep], deployments[dep] = nil, nil, nil
    redis.call('SREM', tag .. 'deployments', dep)
  elseif op == 'quality' then
    local value, weight, source, domain = o.value, o.weight, o.source, opt(o.domain)
    local gkey = tag .. 'bandit:' .. dep
    quals[gkey] = quality_update(learn, qual(gkey), value, weight, source, tick)
    dirty_quals[gkey], deployments[dep] = true, true
    if domain ~= nil then
      local dkey = gkey .. ':' .. domain
      quals[dkey] = quality_update(learn, qual(dkey), value, weight, source, tick)
      dirty_quals[dkey], domains[domain] = true, true
    end
  else
    local now, kind, reward = o.now, o.kind, o.reward
    local latency, alias, domain, retry_after = opt(o.latency), opt(o.alias), opt(o.domain), opt(o.retry_after)
    local s = cb(dep)
    if kind == '' then s = on_success(cfg, s, now) else s = on_failure(cfg, s, now, kind, retry_after) end
    cbs[dep], dirty_cbs[dep], deployments[dep] = s, true, true
    local paced = opt(o.pace_alias)
    local rule = nil
    if paced ~= nil then
      -- a team's record 'alias|team:ID' paces under its alias's rule (pacing.alias_of)
      local cut = string.find(paced, TEAM_SEPARATOR, 1, true)
      rule = pace_rules[cut and string.sub(paced, 1, cut - 1) or paced]
    end
    if rule ~= nil then
      local p = paces[paced]
      if p == nil then p = read_pace(tag .. 'pace:' .. paced) end
      paces[paced] = pace_update(rule, p, opt(o.cost), now)
    end
    if kind == '' or kind == 'provider' then
      tick = tick + 1
      local failed = kind ~= ''
      local gkey = tag .. 'bandit:' .. dep
      arms[gkey] = arm_update(learn, arm(gkey) or fresh, reward, latency, failed, tick)
      dirty_arms[gkey] = true
      if domain ~= nil then
        local dkey = gkey .. ':' .. domain
        arms[dkey] = arm_update(learn, arm(dkey) or fresh, reward, latency, failed, tick)
        dirty_arms[dkey], domains[domain] = true, true
      end
      if kind == '' and alias ~= nil and alias ~= '' then lkgp[alias] = dep end
    end
  end
end

for key in pairs(dirty_arms) do write(key, ARM, arms[key], bandit_ttl) end
for key in pairs(dirty_quals) do write_quality(key, quals[key], bandit_ttl) end
for dep in pairs(dirty_cbs) do write(tag .. 'cb:' .. dep, CB, cbs[dep], breaker_ttl) end
redis.call('SET', tag .. 'tick', fmt(tick), 'EX', bandit_ttl)
local paced_aliases = {}
for alias, p in pairs(paces) do
  write(tag .. 'pace:' .. alias, PACE, p, bandit_ttl)
  paced_aliases[#paced_aliases + 1] = alias
end
if #paced_aliases > 0 then
  redis.call('SADD', tag .. 'paced', unpack(paced_aliases))
  redis.call('EXPIRE', tag .. 'paced', bandit_ttl)
end
local pins = {}
for alias, dep in pairs(lkgp) do pins[#pins + 1] = alias; pins[#pins + 1] = dep end
if #pins > 0 then
  redis.call('HSET', tag .. 'lkgp', unpack(pins))
  redis.call('EXPIRE', tag .. 'lkgp', bandit_ttl)
end
local members = {}
for dep in pairs(deployments) do members[#members + 1] = dep end
if #members > 0 then
  redis.call('SADD', tag .. 'deployments', unpack(members))
  redis.call('EXPIRE', tag .. 'deployments', bandit_ttl)
end
members = {}
for dom in pairs(domains) do members[#members + 1] = dom end
if #members > 0 then
  redis.call('SADD', tag .. 'domains', unpack(members))
  redis.call('EXPIRE', tag .. 'domains', bandit_ttl)
end
redis.call('HSET', tag .. 'applied', process, string.format('%d', seq))
redis.call('EXPIRE', tag .. 'applied', bandit_ttl)
-- Processes come and go (restarts, scaling): forget those silent for a bandit TTL, so that the
-- applied hash (read by every refresh) holds the living ones only.
local server_now = tonumber(redis.call('TIME')[1])
redis.call('ZADD', tag .. 'applied_seen', server_now, process)
redis.call('EXPIRE', tag .. 'applied_seen', bandit_ttl)
local gone = redis.call('ZRANGEBYSCORE', tag .. 'applied_seen', '-inf', server_now - bandit_ttl, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', tag .. 'applied', unpack(gone))
  redis.call('ZREM', tag .. 'applied_seen', unpack(gone))
end
version = redis.call('INCR', tag .. 'version')
return {'status', 'ok', 'version', tostring(version), 'tick', fmt(tick)}
