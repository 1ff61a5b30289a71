-- Expired leases: every running occurrence whose lease expires at or before now becomes
-- failed (retry due now) if it has attempts left, else dead. Returns the updated rows by
-- plan time, then insertion.
local ids = redis.call('ZRANGEBYSCORE', B .. ':running', '-inf', NOW_US)
local reaped = {}
for _, id in ipairs(ids) do
  local h = redis.call('HMGET', okey(id), unpack(HELD))
  if h[1] ~= 'running' then
    redis.call('ZREM', B .. ':running', id)  -- not expected: an index entry without its row
  else
    local k = okey(id)
    local state = 'dead'
    if tonumber(h[8]) < tonumber(h[10]) then state = 'failed' end
    local message = 'lease of ' .. (h[2] or '?') .. ' expired'
    log(id, h, state, 'lease_expired', message)
    stopped(id, h)
    redis.call('HSET', k, 'state', state, 'ecode', 'lease_expired', 'emsg', message)
    if state == 'failed' then
      redis.call('HSET', k, 'due', NOW_US)
      redis.call('ZADD', B .. ':due:' .. h[6], NOW, h[7])
      wake(NOW)
    else
      redis.call('HSET', k, 'finished', NOW_US)
      finished(h[7])
    end
    move(h[7], h[4], 'running', state)
    reaped[#reaped + 1] = {h[7], id}
  end
end
table.sort(reaped, function(a, b) return a[1] < b[1] end)
local rows = {}
for _, r in ipairs(reaped) do rows[#rows + 1] = row(r[2]) end
if #rows > 0 then trim(100 + 2 * #rows) end
return rows_json(rows)
