-- Shared by every script of the Redis store (state/scripts.py puts this file before each): reading
-- and writing records, and the step-by-step mirror of aisia_plugin/breaker.py's transitions and
-- aisia_plugin/bandit.py's update (tests/test_redis_store.py holds the two equal on random
-- outcome sequences). Each script reads its arguments as one named JSON document,
-- cjson.decode(ARGV[1]), built by state/scripts.py (docs/state.md#the-scripts). Floats are stored
-- as %.17g text, which reads back as the same double.

local function num(v, default)
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return default end
  return n
end

local function fmt(x)
  return string.format('%.17g', x)
end

-- The record field tables and their defaults (ARM, ARM_DEFAULT, CB, CB_DEFAULT, PACE,
-- PACE_DEFAULT, PACE_WINDOW, PACE_MAX_STEP, PACE_MAX_CARRY, TEAM_SEPARATOR, QUALITY, QUALITY_SOURCES) are not
-- written here: state/scripts.py generates them from the Python records (records.py,
-- bandit.ArmStats, breaker.BreakerState, pacing.PaceState, quality.py) and puts them before this
-- file when a script is loaded.

local function hash(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local function read_arm(key)
  local h = hash(key)
  if h == nil then return nil end
  -- The hash may hold the deployment's quality evidence alone (q_* fields): no arm yet.
  local any = false
  for _, f in ipairs(ARM) do if h[f] ~= nil then any = true end end
  if not any then return nil end
  local s = {}
  for _, f in ipairs(ARM) do s[f] = num(h[f], ARM_DEFAULT[f]) end
  return s
end

local function read_cb(key)
  local h = hash(key) or {}
  local state = string.upper(string.gsub(h.state or 'CLOSED', '-', '_'))
  if state ~= 'CLOSED' and state ~= 'HALF_OPEN' and state ~= 'OPEN' then state = 'CLOSED' end
  local s = {state = state}
  for _, f in ipairs(CB) do
    if f ~= 'state' then s[f] = num(h[f], CB_DEFAULT[f]) end
  end
  return s
end

local function write(key, fields, rec, ttl)
  local args = {}
  for _, f in ipairs(fields) do
    args[#args + 1] = f
    local v = rec[f]
    args[#args + 1] = type(v) == 'number' and fmt(v) or v
  end
  redis.call('HSET', key, unpack(args))
  redis.call('EXPIRE', key, ttl)
end

local function copy(s)
  local t = {}
  for k, v in pairs(s) do t[k] = v end
  return t
end

-- CircuitBreaker (breaker.py); cfg = {threshold, timeout, max_calls, cooldown, max_retry, lease}
local function effective(cfg, s, now)
  if s.state == 'OPEN' and now - s.last_failure_time > cfg.timeout then return 'HALF_OPEN' end
  return s.state
end

local function probes(cfg, s, now)
  if s.state ~= 'HALF_OPEN' then return 0 end
  if s.probes_in_flight > 0 and now - s.probe_reserved_at > cfg.lease then return 0 end
  return math.max(0, s.probes_in_flight)
end

local function reserve(cfg, s, now)
  local eff = effective(cfg, s, now)
  if eff == 'CLOSED' then return true, s end
  if eff == 'OPEN' then return false, s end
  local n = copy(s)
  if s.state == 'OPEN' then
    n.state, n.success_count, n.probes_in_flight, n.probe_reserved_at = 'HALF_OPEN', 0, 1, now
    return true, n
  end
  local held = probes(cfg, s, now)
  if held >= cfg.max_calls then return false, s end
  n.probes_in_flight, n.probe_reserved_at = held + 1, now
  return true, n
end

local function release(s)
  if s.probes_in_flight <= 0 then return s end
  local n = copy(s)
  n.probes_in_flight = s.probes_in_flight - 1
  return n
end

local function on_success(cfg, s, now)
  local eff = effective(cfg, s, now)
  if eff == 'CLOSED' then
    if s.failures <= 0 and s.probes_in_flight == 0 and s.state == 'CLOSED' then return s end
    local n = copy(s)
    n.state, n.failures, n.probes_in_flight = 'CLOSED', math.max(0, s.failures - 1), 0
    return n
  end
  if eff == 'OPEN' then return s end
  local base = s
  if s.state ~= 'HALF_OPEN' then
    base = copy(s)
    base.state, base.success_count, base.probes_in_flight = 'HALF_OPEN', 0, 0
  end
  local successes = base.success_count + 1
  local n = copy(base)
  if successes >= cfg.max_calls then
    n.state, n.failures, n.last_failure_time, n.success_count, n.probes_in_flight, n.probe_reserved_at =
      'CLOSED', 0, 0, 0, 0, 0
    return n
  end
  n.success_count, n.probes_in_flight = successes, math.max(0, base.probes_in_flight - 1)
  return n
end

local function on_failure(cfg, s, now, kind, retry_after)
  if kind == 'client' then return release(s) end
  if kind == 'rate_limit' then
    local wait = retry_after
    if wait == nil or wait <= 0 then wait = cfg.cooldown end
    wait = math.min(wait, cfg.max_retry)
    local n = copy(release(s))
    n.rate_limited_until = math.max(s.rate_limited_until, now + wait)
    n.rate_limits = math.max(0, s.rate_limits) + 1
    return n
  end
  local eff = effective(cfg, s, now)
  local n = copy(s)
  if eff == 'CLOSED' then
    local failures = math.max(0, s.failures) + 1
    if failures >= cfg.threshold then
      n.state, n.failures, n.last_failure_time, n.success_count, n.probes_in_flight = 'OPEN', failures, now, 0, 0
    else
      n.state, n.failures, n.last_failure_time = 'CLOSED', failures, now
    end
    return n
  end
  if eff == 'HALF_OPEN' then
    n.state, n.failures, n.last_failure_time, n.success_count, n.probes_in_flight =
      'OPEN', math.max(0, s.failures) + 1, now, 0, 0
    return n
  end
  n.last_failure_time = math.max(s.last_failure_time, now)
  return n
end

-- bandit.update; learn = {gamma, ema, threshold}
local function arm_update(learn, s, reward, latency, failed, tick)
  reward = math.min(1, math.max(0, reward))
  if learn.gamma < 1 and tick > s.tick then
    local f = learn.gamma ^ (tick - s.tick)
    s = {pulls = s.pulls * f, total_reward = s.total_reward * f, alpha = 1 + (s.alpha - 1) * f,
         beta = 1 + (s.beta - 1) * f, avg_latency = s.avg_latency, latency_var = s.latency_var,
         failures = s.failures * f, count = s.count, tick = tick}
  end
  local avg, var = s.avg_latency, s.latency_var
  if latency ~= nil and latency >= 0 then
    if s.count == 0 then
      avg, var = latency, 0
    else
      local w = learn.ema
      local delta = latency - avg
      avg = avg * (1 - w) + latency * w
      var = (1 - w) * (var + w * delta * delta)
    end
  end
  local success = reward >= learn.threshold
  return {pulls = s.pulls + 1, total_reward = s.total_reward + reward,
          alpha = s.alpha + (success and 1 or 0), beta = s.beta + (success and 0 or 1),
          avg_latency = avg, latency_var = var, failures = s.failures + (failed and 1 or 0),
          count = s.count + 1, tick = math.max(tick, s.tick)}
end

-- pacing.pace (aisia_plugin/pacing.py), the same operations in the same order; rule = {target,
-- rate, max, min}; a cost that is not a number >= 0 changes nothing.
local function read_pace(key)
  local h = hash(key) or {}
  local s = {}
  for _, f in ipairs(PACE) do s[f] = num(h[f], PACE_DEFAULT[f]) end
  return s
end

local function pace_update(rule, s, cost, now)
  if type(cost) ~= 'number' or cost ~= cost or cost == math.huge or cost < 0 then return s end
  local count = s.count + 1
  local spend = s.spend_per_1k + (1000 * cost - s.spend_per_1k) / math.min(count, PACE_WINDOW)
  local carry = s.carry
  if not (carry >= 0 and carry <= PACE_MAX_CARRY) then carry = 0 end  -- records.read_pace's bounds
  local over = (1000 * cost - rule.target) / rule.target + carry
  local counted = over
  if not (over < PACE_MAX_STEP) then counted = PACE_MAX_STEP end
  local rest = over - counted
  if not (rest < PACE_MAX_CARRY) then rest = PACE_MAX_CARRY end
  local m = s.multiplier + rule.rate * counted
  if m < rule.min then m = rule.min elseif m > rule.max then m = rule.max end
  return {multiplier = m, spend_per_1k = spend, count = count, spend_usd = s.spend_usd + cost, updated = now,
          carry = rest}
end

-- quality.add_evidence (aisia_plugin/quality.py): the quality evidence kept beside an arm, in the
-- same hash as q_<field>; learn = {gamma, ...}

local function read_quality(key)
  local names = {}
  for i, f in ipairs(QUALITY) do names[i] = 'q_' .. f end
  local got = redis.call('HMGET', key, unpack(names))
  local q = {}
  for i, f in ipairs(QUALITY) do
    local v = num(got[i], 0)
    if v < 0 or v > 1e15 then v = 0 end
    q[f] = v
  end
  if q.total > q.weight then q.total = q.weight end
  return q
end

local function write_quality(key, q, ttl)
  local args = {}
  for _, f in ipairs(QUALITY) do
    args[#args + 1] = 'q_' .. f
    args[#args + 1] = fmt(q[f])
  end
  redis.call('HSET', key, unpack(args))
  redis.call('EXPIRE', key, ttl)
end

local function quality_update(learn, q, value, weight, source, tick)
  if learn.quality_gamma < 1 and tick > q.tick then
    local f = learn.quality_gamma ^ (tick - q.tick)
    q = {weight = q.weight * f, total = q.total * f, feedback = q.feedback, judge = q.judge, signal = q.signal,
         tick = tick}
  end
  value = math.min(1, math.max(0, value))
  local n = {weight = q.weight + weight, total = q.total + weight * value, feedback = q.feedback, judge = q.judge,
             signal = q.signal, tick = math.max(tick, q.tick)}
  local which = QUALITY[QUALITY_SOURCES[source]]
  if which ~= nil then n[which] = q[which] + 1 end
  return n
end
