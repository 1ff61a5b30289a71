-- Reads that need several commands in one consistent step. ARGV[5]: the operation.
--   list:     ARGV[6] job ('' = any), ARGV[7] state ('' = any), ARGV[8] limit: rows,
--             newest plan time first, ties newest inserted first. The index walked is the
--             job's, the state's (the smaller of both when both filter) or all.
--   counts:   {flat (job \0 state, count) pairs, number of claimable rows due by now}.
--   counts_of: ARGV[6] n, ARGV[7..6+n] the states, ARGV[7+n..] some jobs: {flat (job \0
--             state, count) pairs of those jobs, flat (state, count) pairs of every job,
--             the due number}; reads 1 + n + jobs x n counters, whatever the number of jobs.
--   next_due: ARGV[6..] tasks: the earliest due time of their claimable rows, or nil.
local op = ARGV[5]
if op == 'list' then
  local job, state, limit = ARGV[6], ARGV[7], tonumber(ARGV[8])
  local src, want_job, want_state = B .. ':all', nil, nil
  if job ~= '' and state ~= '' then
    local jk, sk = B .. ':job:' .. job, B .. ':st:' .. state
    if redis.call('ZCARD', jk) <= redis.call('ZCARD', sk) then
      src, want_state = jk, state
    else
      src, want_job = sk, job
    end
  elseif job ~= '' then
    src = B .. ':job:' .. job
  elseif state ~= '' then
    src = B .. ':st:' .. state
  end
  local out, start = {}, 0
  local page_size = math.max(limit, 100)
  while #out < limit do
    local page = redis.call('ZREVRANGE', src, start, start + page_size - 1)
    if #page == 0 then break end
    for _, ord in ipairs(page) do
      local id = string.sub(ord, 31)
      local ok = true
      if want_job or want_state then
        local h = redis.call('HMGET', okey(id), 'job', 'state')
        ok = (want_job == nil or h[1] == want_job) and (want_state == nil or h[2] == want_state)
      end
      if ok then
        out[#out + 1] = row(id)
        if #out >= limit then break end
      end
    end
    start = start + page_size
  end
  return rows_json(out)
elseif op == 'counts' then
  local due = 0
  for _, task in ipairs(redis.call('SMEMBERS', B .. ':tasks')) do
    due = due + redis.call('ZCOUNT', B .. ':due:' .. task, '-inf', NOW_US)
  end
  return {redis.call('HGETALL', B .. ':counts'), due}
elseif op == 'counts_of' then
  local due = 0
  for _, task in ipairs(redis.call('SMEMBERS', B .. ':tasks')) do
    due = due + redis.call('ZCOUNT', B .. ':due:' .. task, '-inf', NOW_US)
  end
  local n = tonumber(ARGV[6])
  local named, totals = {}, {}
  for i = 7, 6 + n do
    local state = ARGV[i]
    local total = redis.call('ZCARD', B .. ':st:' .. state)
    if total > 0 then
      totals[#totals + 1] = state
      totals[#totals + 1] = total
    end
  end
  for j = 7 + n, #ARGV do
    for i = 7, 6 + n do
      local field = ARGV[j] .. '\0' .. ARGV[i]
      local count = redis.call('HGET', B .. ':counts', field)
      if count and tonumber(count) > 0 then
        named[#named + 1] = field
        named[#named + 1] = count
      end
    end
  end
  return {named, totals, due}
elseif op == 'next_due' then
  local best, best_id = nil, nil
  for i = 6, #ARGV do
    local got = redis.call('ZRANGE', B .. ':due:' .. ARGV[i], 0, 0, 'WITHSCORES')
    if #got > 0 and (best == nil or tonumber(got[2]) < best) then
      best, best_id = tonumber(got[2]), string.sub(got[1], 31)
    end
  end
  if best_id == nil then return false end
  return redis.call('HGET', okey(best_id), 'due')
end
return redis.error_reply('unknown read operation ' .. tostring(op))
