-- Fold one process's contextual learning into the shared models and answer what changed, in one
-- atomic call (aisia_plugin/contextual.py: the models; redis.py: the client).
--
-- Per deployment: <tag>ctx:<dep> hash {scale, tick, count, p0, prior_mean, prior_count, version,
-- created (the server's TIME when the column was started: a version is created:version, so that a
-- column re-created after a loss never repeats an old one)},
-- <tag>ctxw:<dep> string (slot i's stored h and dp as two little-endian doubles at byte 16*i; the
-- true value is stored * scale), <tag>ctxa:<dep> hash {process: last fold applied}; the set
-- <tag>ctxdeps names them.
--
-- A fold (seq, tick, scale, count, records) is what the process learned since its previous fold,
-- in the stored units of its own column at that scale and tick. Applied once per (process, seq):
-- the column is brought to the later tick (scale * gamma^elapsed, the bandit's forgetting), then
-- each record added times scale_fold * gamma^(column tick - fold tick) / scale_column.
--
-- A client splits a large fold over several calls (each column's records in one): Redis runs no
-- script for long, and each column applies each fold once whichever call carries it.
--
-- KEYS[1] = <tag>ctxdeps
-- ARGV[1] = one JSON document (scripts.contextual_doc):
--   {tag, process, gamma, ttl, others, columns = [column, ...]}
--   others: null (answer these columns only), or an array of the columns the client sent in its
--   other calls: every column Redis holds besides them and these is answered in full.
--   column: {deployment, known (version; '' never seen: a base follows; '?' read it back),
--            base|null, folds = [{seq, tick, scale, count}, ...]}
--   base:   {p0, scale, tick, count, prior_mean, prior_count, applied = {process = seq}} (the
--            client's view of the shared column: it re-creates a column nobody holds)
-- ARGV[2..] = the binary record blobs, in the order of the columns: the base's records (when a
--   base), then each fold's; a record is struct '<i4dd': slot, h, dp.
-- Reply, name/value pairs (scripts.FoldReply): status 'absent' and absent = [dep, ...] when a column
-- the client knows is gone (nothing applied: the client sends its view as a base), else status 'ok'
-- and rows, each a scripts.FoldRow: deployment, version, full = 0 when the client's view plus its
-- folds is the column, or full = 1 with scale, tick, count, p0, prior_mean, prior_count, applied
-- (flat pairs) and weights (the string) for one it must read (with `others`, also every column it
-- did not send).
local a = cjson.decode(ARGV[1])
local tag, process, gamma, ttl, cols = a.tag, a.process, a.gamma, a.ttl, a.columns
local RESCALE_BELOW = 1e-20  -- contextual.py's _RESCALE_BELOW (the local copies are float32)
-- The column's hash fields (full_row answers the first six by name).
local META = {'scale', 'tick', 'count', 'p0', 'prior_mean', 'prior_count', 'version', 'created'}

local function key(kind, dep)
  return tag .. kind .. ':' .. dep
end

local absent = {}
for _, c in ipairs(cols) do
  if c.known ~= '' and c.base == cjson.null and redis.call('EXISTS', key('ctx', c.deployment)) == 0 then
    absent[#absent + 1] = c.deployment
  end
end
if #absent > 0 then return {'status', 'absent', 'absent', absent} end

-- struct.pack / unpack many values per call (a call per slot costs more than the arithmetic),
-- in chunks well inside Lua's C stack (8000 values).
local CHUNK = 600
local formats = {}
local function format(item, k)
  local key = item .. k
  local f = formats[key]
  if f == nil then
    f = '<' .. string.rep(item, k)
    formats[key] = f
  end
  return f
end

local function each_record(blob, f)
  local n, done, pos = math.floor(#blob / 20), 0, 1
  while done < n do
    local k = math.min(CHUNK, n - done)
    local v = {struct.unpack(format('i4dd', k), blob, pos)}
    for j = 0, 3 * k - 1, 3 do f(v[j + 1], v[j + 2], v[j + 3]) end
    pos, done = v[3 * k + 1], done + k
  end
end

local function records_in(blob)
  return math.floor(#blob / 20)
end

-- A column's weights while a call changes them: a few slots read and written one by one
-- (GETRANGE, SETRANGE), or, past DENSE_FROM records, the whole string unpacked once and written
-- back with one SET.
local DENSE_FROM = 256
local function weights(wkey, dense)
  local w = {}
  if dense then
    local s = redis.call('GET', wkey) or ''
    local n, done, pos = math.floor(#s / 8), 0, 1
    while done < n do
      local k = math.min(CHUNK, n - done)
      local v = {struct.unpack(format('d', k), s, pos)}
      for j = 1, k do w[done + j] = v[j] end
      pos, done = v[k + 1], done + k
    end
    local size = n
    local t = {}
    function t.get(i)
      return w[2 * i + 1] or 0, w[2 * i + 2] or 0
    end
    function t.put(i, h, d)
      w[2 * i + 1], w[2 * i + 2] = h, d
      if 2 * i + 2 > size then size = 2 * i + 2 end
    end
    function t.all()
      return math.floor(size / 2)
    end
    function t.write()
      for j = 1, size do if w[j] == nil then w[j] = 0 end end
      local parts = {}
      for i = 1, size, CHUNK do
        local j = math.min(i + CHUNK - 1, size)
        parts[#parts + 1] = struct.pack(format('d', j - i + 1), unpack(w, i, j))
      end
      redis.call('SET', wkey, table.concat(parts))
    end
    return t
  end
  local t, len = {}, nil
  function t.get(i)
    local x = w[i]
    if x then return x[1], x[2] end
    if len == nil then len = redis.call('STRLEN', wkey) end
    if len >= 16 * i + 16 then
      return struct.unpack('<dd', redis.call('GETRANGE', wkey, 16 * i, 16 * i + 15))
    end
    return 0, 0
  end
  function t.put(i, h, d)
    w[i] = {h, d}
  end
  function t.all()
    if len == nil then len = redis.call('STRLEN', wkey) end
    return math.floor(len / 16)
  end
  function t.write()
    for i, x in pairs(w) do redis.call('SETRANGE', wkey, 16 * i, struct.pack('<dd', x[1], x[2])) end
  end
  return t
end

local function full_row(dep)
  local v = redis.call('HMGET', key('ctx', dep), unpack(META))
  return {'deployment', dep, 'version', (v[8] or '') .. ':' .. (v[7] or '0'), 'full', 1, 'scale', v[1], 'tick', v[2],
          'count', v[3], 'p0', v[4], 'prior_mean', v[5], 'prior_count', v[6], 'applied', redis.call('HGETALL', key('ctxa', dep)),
          'weights', redis.call('GET', key('ctxw', dep)) or ''}
end

local rows, sent = {}, {}
local b = 2  -- the next blob
for _, c in ipairs(cols) do
  local dep, known, base, folds = c.deployment, c.known, c.base, c.folds
  sent[dep] = true
  local mkey, wkey, akey = key('ctx', dep), key('ctxw', dep), key('ctxa', dep)
  local m
  local v = redis.call('HMGET', mkey, unpack(META))
  if v[1] then
    m = {}
    for k, f in ipairs(META) do m[f] = num(v[k], 0) end
    m.created = v[8] or ''
  end
  local before = m and m.version or 0
  local n = 0  -- the records this call may apply to the column
  for j = 0, #folds - ((base ~= cjson.null) and 0 or 1) do n = n + records_in(ARGV[b + j]) end
  local w = weights(wkey, n >= DENSE_FROM)
  local changed = false
  if base ~= cjson.null then
    local blob = ARGV[b]; b = b + 1
    if m == nil and (#blob > 0 or #folds > 0) then  -- nobody holds it: the client's view starts it
      m = {p0 = base.p0, scale = base.scale, tick = base.tick, count = base.count, prior_mean = base.prior_mean,
           prior_count = base.prior_count, version = 0}
      local t = redis.call('TIME')
      m.created = t[1] .. '.' .. t[2]
      redis.call('DEL', wkey, akey)  -- leftovers of a column whose meta expired first
      w = weights(wkey, n >= DENSE_FROM)
      each_record(blob, w.put)
      for proc, seq in pairs(base.applied) do redis.call('HSET', akey, proc, seq) end
      changed = true
    end
  end
  if m == nil then
    b = b + #folds  -- nothing to fold into, nothing to start it from (the client has learned nothing)
    rows[#rows + 1] = {'deployment', dep, 'version', '', 'full', 0}
  else
    local last = tonumber(redis.call('HGET', akey, process) or '0')
    local applied = last
    for _, f in ipairs(folds) do
      local blob = ARGV[b]; b = b + 1
      local seq, ftick, fscale, fcount = f.seq, f.tick, f.scale, f.count
      if seq > applied then
        if ftick > m.tick then
          if gamma < 1 then m.scale = m.scale * gamma ^ (ftick - m.tick) end
          m.tick = ftick
        end
        local factor = fscale
        if gamma < 1 and m.tick > ftick then factor = factor * gamma ^ (m.tick - ftick) end
        factor = factor / m.scale
        local get, put = w.get, w.put
        each_record(blob, function(i, h, d)
          local h0, d0 = get(i)
          put(i, h0 + h * factor, d0 + d * factor)
        end)
        m.count = m.count + fcount
        applied = seq
        changed = true
      end
    end
    if changed and m.scale < RESCALE_BELOW then  -- a long run of forgetting: every slot times the scale
      for i = 0, w.all() - 1 do
        local h, d = w.get(i)
        w.put(i, h * m.scale, d * m.scale)
      end
      m.scale = 1
    end
    if changed then
      w.write()
      m.version = before + 1
      redis.call('HSET', mkey, 'scale', fmt(m.scale), 'tick', fmt(m.tick), 'count', fmt(m.count), 'p0', fmt(m.p0),
                 'prior_mean', fmt(m.prior_mean), 'prior_count', fmt(m.prior_count), 'version', tostring(m.version),
                 'created', m.created)
      if applied > last then redis.call('HSET', akey, process, tostring(applied)) end
      for _, k in ipairs({mkey, wkey, akey}) do redis.call('EXPIRE', k, ttl) end
      redis.call('SADD', KEYS[1], dep)
      redis.call('EXPIRE', KEYS[1], ttl)
    end
    if known ~= '' and known == m.created .. ':' .. before then
      rows[#rows + 1] = {'deployment', dep, 'version', m.created .. ':' .. m.version, 'full', 0}
    else
      rows[#rows + 1] = full_row(dep)
    end
  end
end
if a.others == cjson.null then return {'status', 'ok', 'rows', rows} end
for _, dep in ipairs(a.others) do sent[dep] = true end
for _, dep in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if not sent[dep] then
    if redis.call('EXISTS', key('ctx', dep)) == 1 then
      rows[#rows + 1] = full_row(dep)
    else
      redis.call('SREM', KEYS[1], dep)  -- its TTL ran out
    end
  end
end
return {'status', 'ok', 'rows', rows}
