-- Pages of jobs with their last outcome (the capability pages_jobs: soloist.stores.pages),
-- each one script call. ARGV[5]: the operation.
--   page:   ARGV[6], ARGV[7]: the range of names (ZRANGEBYLEX bounds of ':jobs'), ARGV[8]
--           scan (jobs examined at most), ARGV[9] paused ('' either, '0', '1'), ARGV[10]
--           outcome ('' any, 'none', or a finished state), ARGV[11] take (limit + 1).
--           Returns {jobs read (at most scan + 1), the scan-th name or false, the matches
--           as JSON: [name, job fields in JOB order, last outcome or false]}, the last
--           outcome being [id, state, plan, finished, error code].
--   counts: ARGV[6], ARGV[7]: the range of names; how many jobs it holds.
--   index:  ARGV[6] first rank, ARGV[7] count: the upgrade of a batch of the history (see
--           soloist.stores.redis.upgrade.index_finished); how many were read.
local op = ARGV[5]

-- The newest finished occurrence of ``job`` by plan time, then insertion: the newest member
-- of its finished index (lib.lua's fin_key, kept by move), or false. A member whose row is
-- gone or not finished (written by an older soloist beside this one) is passed over, at
-- most 8 of them: the work stays bounded.
local function last_of(job)
  for _, ord in ipairs(redis.call('ZREVRANGE', fin_key(job), 0, 7)) do
    local id = string.sub(ord, 31)
    local h = redis.call('HMGET', okey(id), 'state', 'plan', 'finished', 'ecode')
    if FINISHED[h[1]] then return {id, h[1], h[2], h[3], h[4]} end
  end
  return false
end

if op == 'page' then
  local scan, paused, outcome = tonumber(ARGV[8]), ARGV[9], ARGV[10]
  local take = tonumber(ARGV[11])
  local names = redis.call('ZRANGEBYLEX', B .. ':jobs', ARGV[6], ARGV[7], 'LIMIT', 0, scan + 1)
  local out = {}
  for i = 1, math.min(#names, scan) do
    if #out >= take then break end
    local name = names[i]
    local fields = redis.call('HMGET', B .. ':j:' .. name, unpack(JOB))
    if fields[1] and (paused == '' or fields[6] == paused) then
      local last = last_of(name)
      if outcome == '' or outcome == (last and last[2] or 'none') then
        out[#out + 1] = {name, fields, last}
      end
    end
  end
  return {#names, names[scan] or false, rows_json(out)}
elseif op == 'counts' then
  return redis.call('ZLEXCOUNT', B .. ':jobs', ARGV[6], ARGV[7])
elseif op == 'index' then
  -- Key layout 2 to 3 (migrate): the finished occurrences ranked ARGV[6] to ARGV[6] +
  -- ARGV[7] - 1 from the newest end of the history enter their jobs' finished indexes.
  local first = tonumber(ARGV[6])
  local ords = redis.call('ZREVRANGE', B .. ':done', first, first + tonumber(ARGV[7]) - 1)
  for _, ord in ipairs(ords) do
    local h = redis.call('HMGET', okey(string.sub(ord, 31)), 'job', 'state')
    if h[1] and FINISHED[h[2]] then redis.call('ZADD', fin_key(h[1]), 0, ord) end
  end
  return #ords
end
return redis.error_reply('unknown pages operation ' .. tostring(op))
