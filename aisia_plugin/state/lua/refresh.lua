-- Everything a replica's local copy holds, in one round trip, with the server's clock; only the
-- version, epoch and clock when nothing was written since the version the client has.
-- KEYS[1] = <tag>tick
-- ARGV[1] = one JSON document (scripts.refresh_doc): {tag, known_version ('' reads everything)}
-- Returns name/value pairs (scripts.RefreshReply): version, epoch, seconds, microseconds, and unless
-- nothing changed, tick, applied, lkgp, deployments (RefreshRow pairs), paces (PaceRow pairs).
local a = cjson.decode(ARGV[1])
local tag = a.tag
local t = redis.call('TIME')
local version = redis.call('GET', tag .. 'version') or '0'
local epoch = redis.call('GET', tag .. 'epoch') or ''
if version == a.known_version then
  return {'version', version, 'epoch', epoch, 'seconds', t[1], 'microseconds', t[2]}
end
local domains = redis.call('SMEMBERS', tag .. 'domains')
local rows = {}
for _, dep in ipairs(redis.call('SMEMBERS', tag .. 'deployments')) do
  local key = tag .. 'bandit:' .. dep
  local per_domain = {}
  for _, dom in ipairs(domains) do
    local h = redis.call('HGETALL', key .. ':' .. dom)
    if #h > 0 then per_domain[#per_domain + 1] = dom; per_domain[#per_domain + 1] = h end
  end
  rows[#rows + 1] = {'deployment', dep, 'arm', redis.call('HGETALL', key), 'breaker', redis.call('HGETALL', tag .. 'cb:' .. dep),
                    'domains', per_domain}
end
local paces = {}
for _, alias in ipairs(redis.call('SMEMBERS', tag .. 'paced')) do
  paces[#paces + 1] = {'alias', alias, 'pace', redis.call('HGETALL', tag .. 'pace:' .. alias)}
end
return {'version', version, 'epoch', epoch, 'seconds', t[1], 'microseconds', t[2],
        'tick', redis.call('GET', tag .. 'tick') or '0', 'applied', redis.call('HGETALL', tag .. 'applied'),
        'lkgp', redis.call('HGETALL', tag .. 'lkgp'), 'deployments', rows, 'paces', paces}
