-- Fenced writes of a runner (instance ARGV[6]): each applies only to a row still running
-- under this instance with the given fencing token. ARGV[5]: the operation.
--   renew:    ARGV[7] lease ttl (us); then pairs id, token.
--   release:  pairs id, token (from ARGV[7]).
--   complete: from ARGV[7], 7 values per outcome: id, token, state, retry time ('' = now),
--             error code, error message, result (optional strings, see opt).
-- Returns the ids whose write applied.
local op, instance = ARGV[5], ARGV[6]
local applied = {}
if op == 'renew' then
  local lease = NOW + tonumber(ARGV[7])
  for i = 8, #ARGV, 2 do
    local id = ARGV[i]
    if held(id, ARGV[i + 1], instance) then
      redis.call('HSET', okey(id), 'lease', us(lease))
      redis.call('ZADD', B .. ':running', lease, id)
      applied[#applied + 1] = id
    end
  end
elseif op == 'release' then
  local message = 'lease released before the attempt finished'
  for i = 7, #ARGV, 2 do
    local id = ARGV[i]
    local h = held(id, ARGV[i + 1], instance)
    if h then
      local att = tonumber(h[8])
      local state = 'scheduled'
      if att > 1 then state = 'failed' end
      log(id, h, 'released', 'cancelled', message)
      stopped(id, h)
      redis.call('HSET', okey(id), 'state', state, 'att', math.max(att - 1, 0),
        'ecode', 'cancelled', 'emsg', message)
      redis.call('ZADD', B .. ':due:' .. h[6], h[11], h[7])
      move(h[7], h[4], 'running', state)
      wake(tonumber(h[11]))
      applied[#applied + 1] = id
    end
  end
elseif op == 'complete' then
  for i = 7, #ARGV, 7 do
    local id, state = ARGV[i], ARGV[i + 2]
    local h = held(id, ARGV[i + 1], instance)
    if h then
      local k = okey(id)
      local ecode, emsg = opt(ARGV[i + 4]), opt(ARGV[i + 5])
      log(id, h, state, ecode, emsg)
      stopped(id, h)
      setopt(k, 'ecode', ecode)
      setopt(k, 'emsg', emsg)
      setopt(k, 'result', opt(ARGV[i + 6]))
      if state == 'failed' then
        local due = ARGV[i + 3]
        if due == '' then due = NOW_US end
        redis.call('HSET', k, 'state', state, 'due', due)
        redis.call('ZADD', B .. ':due:' .. h[6], due, h[7])
        wake(tonumber(due))
      else
        redis.call('HSET', k, 'state', state, 'finished', NOW_US)
        finished(h[7])
      end
      move(h[7], h[4], 'running', state)
      applied[#applied + 1] = id
    end
  end
  trim(100 + 2 * #applied)
end
return applied
