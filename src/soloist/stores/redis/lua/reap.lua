-- Expired leases: every running occurrence whose lease expires at or before now. A crash
-- is not a failure (see Store.occurrence_reap): while crashes < max crashes it is claimable
-- again at once (scheduled if its attempt was the first, else failed), its attempt given
-- back, back in its task's due set with its due time unchanged; otherwise dead with
-- crash_loop. Returns the updated rows by plan time, then insertion.
local ids = redis.call('ZRANGEBYSCORE', B .. ':running', '-inf', NOW_US)
local reaped = {}
for _, id in ipairs(ids) do
  local h = redis.call('HMGET', okey(id), unpack(HELD))
  if h[1] ~= 'running' then
    redis.call('ZREM', B .. ':running', id)  -- not expected: an index entry without its row
  else
    local k = okey(id)
    -- Rows written before crash counts existed have neither field: 0 crashes, budget 3.
    local crashes, maxc = tonumber(h[12] or '0'), tonumber(h[13] or '3')
    local crash = us(crashes + 1)
    local runner = 'lease of ' .. (h[2] or '?') .. ' expired (crash ' .. crash
    stopped(id, h)
    if h[15] == '1' then
      -- Its cancellation was requested: it does not run again, whatever its budget.
      local message = 'lease of ' .. (h[2] or '?') .. ' expired after its cancellation was requested'
      log(id, h, 'dead', 'cancelled', message)
      redis.call('HSET', k, 'state', 'dead', 'crashes', crash, 'maxc', us(maxc),
        'finished', NOW_US, 'ecode', 'cancelled', 'emsg', message)
      finished(h[7])
      move(h[7], h[4], 'running', 'dead')
    elseif crashes < maxc then
      local att = tonumber(h[8])
      local state = 'scheduled'
      if att > 1 then state = 'failed' end
      local message = runner .. ' of ' .. us(maxc) .. ' allowed)'
      log(id, h, 'crashed', 'lease_expired', message)
      redis.call('HSET', k, 'state', state, 'att', math.max(att - 1, 0), 'crashes', crash,
        'maxc', us(maxc), 'ecode', 'lease_expired', 'emsg', message)
      redis.call('ZADD', B .. ':due:' .. h[6], h[11], h[7])
      move(h[7], h[4], 'running', state)
      wake(tonumber(h[11]))
    else
      local message = runner .. ', max_crashes=' .. us(maxc) .. '): its runner keeps dying'
      log(id, h, 'dead', 'crash_loop', message)
      redis.call('HSET', k, 'state', 'dead', 'crashes', crash, 'maxc', us(maxc),
        'finished', NOW_US, 'ecode', 'crash_loop', 'emsg', message)
      finished(h[7])
      move(h[7], h[4], 'running', 'dead')
    end
    reaped[#reaped + 1] = {h[7], id}
  end
end
table.sort(reaped, function(a, b) return a[1] < b[1] end)
local rows = {}
for _, r in ipairs(reaped) do rows[#rows + 1] = row(r[2]) end
if #rows > 0 then trim(100 + 2 * #rows) end
return rows_json(rows)
