-- Instances: a hash per instance {info, started, seen, expires} and a sorted set of ids by
-- expiry. ARGV[5]: the operation.
--   beat:   ARGV[6] id, ARGV[7] info (JSON), ARGV[8] started, ARGV[9] ttl (us), ARGV[10]
--           the store identity the caller knows (''; none); the first started is kept
--           while the hash lives. Returns 1, or the identity found instead ('' if none):
--           the store lost its data, and nothing is written.
--   list:   forgets instances expired over an hour ago, returns the live ones as
--           {id, info, started, seen, expires}.
--   remove: ARGV[6] id.
local op = ARGV[5]
local function ikey(id) return B .. ':i:' .. id end
local index = B .. ':instances'
if op == 'beat' then
  local changed = identity_changed(ARGV[10])
  if changed then return changed end
  local k = ikey(ARGV[6])
  local expires = NOW + tonumber(ARGV[9])
  redis.call('HSET', k, 'info', ARGV[7], 'seen', NOW_US, 'expires', us(expires))
  redis.call('HSETNX', k, 'started', ARGV[8])
  redis.call('ZADD', index, expires, ARGV[6])
  return 1
elseif op == 'list' then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', us(NOW - 3600000000))) do
    redis.call('DEL', ikey(id))
    redis.call('ZREM', index, id)
  end
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', index, '(' .. NOW_US, '+inf')) do
    local h = redis.call('HMGET', ikey(id), 'info', 'started', 'seen', 'expires')
    out[#out + 1] = {id, h[1], h[2], h[3], h[4]}
  end
  return out
elseif op == 'remove' then
  redis.call('DEL', ikey(ARGV[6]))
  redis.call('ZREM', index, ARGV[6])
  return 1
end
return redis.error_reply('unknown instance operation ' .. tostring(op))
