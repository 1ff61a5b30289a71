-- Planning partition leases, apart from the leader leases: a hash per partition
-- (part_key: {holder, epoch, expires}) and ':parts', the partitions by lease expiry. The
-- epoch rises by one (HINCRBY) at each new term and the hash is never deleted, so epochs
-- never repeat: they fence plan writes (plan.lua). ARGV[5]: the operation.
--   sync: ARGV[6] instance, ARGV[7] ttl (us), ARGV[8..] the partitions it wants: extends
--         its unexpired leases among them, takes the free (missing or expired) ones, leaves
--         the others' to them, and releases (expires = now) its leases outside them.
--   list: nothing written.
-- Both return every unexpired lease as {partition, holder, epoch, expires}, by partition.
local op = ARGV[5]
local INDEX = B .. ':parts'
local function live()
  local out = {}
  for _, n in ipairs(redis.call('ZRANGEBYSCORE', INDEX, '(' .. NOW_US, '+inf')) do
    local h = redis.call('HMGET', part_key(n), 'holder', 'epoch', 'expires')
    out[#out + 1] = {n, h[1], h[2], h[3]}
  end
  table.sort(out, function(a, b) return tonumber(a[1]) < tonumber(b[1]) end)
  return out
end
if op == 'list' then return live() end
if op ~= 'sync' then
  return redis.error_reply('unknown partition operation ' .. tostring(op))
end
local instance = ARGV[6]
local expires = us(NOW + tonumber(ARGV[7]))
local want = {}
for i = 8, #ARGV do want[ARGV[i]] = true end
for _, n in ipairs(redis.call('ZRANGEBYSCORE', INDEX, '(' .. NOW_US, '+inf')) do
  if not want[n] and redis.call('HGET', part_key(n), 'holder') == instance then
    redis.call('HSET', part_key(n), 'expires', NOW_US)
    redis.call('ZADD', INDEX, NOW_US, n)
  end
end
for i = 8, #ARGV do
  local n = ARGV[i]
  local k = part_key(n)
  local h = redis.call('HMGET', k, 'holder', 'expires')
  local held = h[1] and tonumber(h[2]) > NOW
  if not held then
    redis.call('HINCRBY', k, 'epoch', 1)
    redis.call('HSET', k, 'holder', instance, 'expires', expires)
    redis.call('ZADD', INDEX, expires, n)
  elseif h[1] == instance then
    redis.call('HSET', k, 'expires', expires)
    redis.call('ZADD', INDEX, expires, n)
  end
end
return live()
