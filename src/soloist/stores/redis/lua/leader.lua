-- Leader leases: one hash per election name {holder, epoch, elected, expires}. The epoch
-- is incremented (HINCRBY) every time the lease passes to a new term and is never reset,
-- so it is a fencing token. ARGV[5]: elect | renew | resign | get; ARGV[6] name,
-- ARGV[7] instance, ARGV[8] epoch, ARGV[9] ttl (us), ARGV[10] the store identity the
-- caller knows (''; none). Returns the lease (as HMGET) or nil; resign returns 1 or nil.
-- elect and renew return the identity found instead ('' if none) when it is not the
-- caller's: the store lost its data (the epoch starts over), and nothing is written.
local op, k = ARGV[5], B .. ':lead:' .. ARGV[6]
local LEASE = {'holder', 'epoch', 'elected', 'expires'}
local h = redis.call('HMGET', k, unpack(LEASE))
local live = h[1] and tonumber(h[4]) > NOW
if op == 'get' then
  if live then return h end
  return false
end
local instance = ARGV[7]
if op == 'elect' or op == 'renew' then
  local changed = identity_changed(ARGV[10])
  if changed then return changed end
end
if op == 'elect' then
  local expires = us(NOW + tonumber(ARGV[9]))
  if live then
    if h[1] ~= instance then return false end
    redis.call('HSET', k, 'expires', expires)
  else
    redis.call('HINCRBY', k, 'epoch', 1)
    redis.call('HSET', k, 'holder', instance, 'elected', NOW_US, 'expires', expires)
  end
  return redis.call('HMGET', k, unpack(LEASE))
end
if not (live and h[1] == instance and h[2] == ARGV[8]) then return false end
if op == 'renew' then
  redis.call('HSET', k, 'expires', us(NOW + tonumber(ARGV[9])))
  return redis.call('HMGET', k, unpack(LEASE))
elseif op == 'resign' then
  redis.call('HSET', k, 'expires', NOW_US)
  return 1
end
return redis.error_reply('unknown leader operation ' .. tostring(op))
