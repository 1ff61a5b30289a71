-- Fenced writes of a runner (instance ARGV[6]): each applies only to a row still running
-- under this instance with the given fencing token. ARGV[5]: the operation.
--   renew:    ARGV[7] lease ttl (us); then pairs id, token.
--   release:  pairs id, token (from ARGV[7]).
--   complete: from ARGV[7], 7 values per outcome: id, token, state, retry time ('' = now),
--             error code, error message, result (optional strings, see opt).
--   cancel:   (not fenced: anyone may ask) ARGV[7] the id, ARGV[8] the message of a
--             cancelled claimable row; see Store.occurrence_cancel. Returns {} for an
--             unknown id, else {1 if changed else 0, the row as JSON}.
-- Returns the ids whose write applied; renew marks those whose cancellation was requested
-- with a leading '!'. A row whose cancellation was requested ('cancel' = '1', h[15]) is
-- never made claimable again: a retry becomes dead, a release ends it dead.
local op, instance = ARGV[5], ARGV[6]
local applied = {}
local CANCEL_RELEASED = 'cancelled on request; its runner stopped before the attempt finished'
if op == 'renew' then
  local lease = NOW + tonumber(ARGV[7])
  for i = 8, #ARGV, 2 do
    local id = ARGV[i]
    local h = held(id, ARGV[i + 1], instance)
    if h then
      redis.call('HSET', okey(id), 'lease', us(lease))
      redis.call('ZADD', B .. ':running', lease, id)
      if h[15] == '1' then id = '!' .. id end
      applied[#applied + 1] = id
    end
  end
elseif op == 'cancel' then
  local id = ARGV[7]
  local k = okey(id)
  local h = redis.call('HMGET', k, 'state', 'cancel', 'job', 'task', 'ord')
  if not h[1] then return {} end
  local changed = 0
  if h[1] == 'scheduled' or h[1] == 'failed' then
    redis.call('ZREM', B .. ':due:' .. h[4], h[5])
    redis.call('HSET', k, 'state', 'dead', 'finished', NOW_US, 'ecode', 'cancelled',
      'emsg', ARGV[8], 'cancel', '1')
    redis.call('HDEL', k, 'lease')
    move(h[5], h[3], h[1], 'dead')
    finished(h[5])
    trim(100)
    changed = 1
  elseif h[1] == 'running' and h[2] ~= '1' then
    redis.call('HSET', k, 'cancel', '1')
    changed = 1
  end
  return {changed, rows_json({row(id)})}
elseif op == 'release' then
  local message = 'lease released before the attempt finished'
  for i = 7, #ARGV, 2 do
    local id = ARGV[i]
    local h = held(id, ARGV[i + 1], instance)
    if h and h[15] == '1' then
      log(id, h, 'dead', 'cancelled', CANCEL_RELEASED)
      stopped(id, h)
      redis.call('HSET', okey(id), 'state', 'dead', 'finished', NOW_US, 'ecode', 'cancelled',
        'emsg', CANCEL_RELEASED)
      finished(h[7])
      move(h[7], h[4], 'running', 'dead')
      applied[#applied + 1] = id
    elseif h then
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
      if state == 'failed' and h[15] == '1' then state, ecode = 'dead', 'cancelled' end
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
if op == 'release' and #applied > 0 then trim(100 + 2 * #applied) end
return applied
