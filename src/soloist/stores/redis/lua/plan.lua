-- The planning index and its cursors (see PLAN and cursor_parse in lib.lua). ARGV[5]: the
-- operation.
--   advance: steps from ARGV[6], each: job, scope, slot, expected last plan time ('': never
--            planned), new last ('': none), added count, next plan time ('': out of the
--            index), fence partition ('': no fence), fence epoch, n items, then 13 values
--            per item (insert_item). Each step on its own: it applies only if the cursor's
--            last plan time is the expected one (no cursor counts as never planned) and
--            the fence's partition lease still has its epoch and has not expired; then the
--            cursor, its index entry and the items (existing dedupe keys ignored) are
--            written. Returns 1 or 0 per step, in order.
--   due:     ARGV[6] before, ARGV[7] limit, then slot ranges lo, hi ([lo, hi); none: every
--            slot). Returns {next_at or false, streams...}, a stream being {job, scope,
--            cursor value, job fields (JOB) or false}: at most limit streams of the wanted
--            slots due at or before `before`, by (time, job, scope), and next_at, the
--            earliest time after `before` of the wanted slots. Members of other slots are
--            skipped, at most MAX_SKIPPED per call: past that, the call stops and answers
--            what it found with next_at = the time of the last member it looked at (never
--            later than the true one, so the planner looks again by then, when those
--            members' own planners have moved them on).
--   ensure:  ARGV[6] time ('': now), ARGV[7] revive '1'/'0', then job, scope, slot per
--            stream. A missing cursor is created never planned at that time; with revive,
--            an existing one out of the index gets that time. Returns how many changed.
--   upgrade: from ARGV[6], groups of job, n, then n pairs scope, slot: each cursor still in
--            the old format 'last|count' gets next = last and enters the index, so the
--            planner looks at it again (migrate, once). Returns how many were upgraded.
local op = ARGV[5]
-- Filtered-out members plan_due looks at, at most, per call (see 'due').
local MAX_SKIPPED = 5000

local function fence_holds(partition, epoch)
  if partition == '' then return true end
  local h = redis.call('HMGET', part_key(partition), 'epoch', 'expires')
  return h[1] ~= false and tonumber(h[1]) == tonumber(epoch) and tonumber(h[2]) > NOW
end

local function advance(i)
  local job, scope, slot, expected = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local v = redis.call('HGET', B .. ':cur:' .. job, scope)
  local last, count = '', 0
  if v then last, count = cursor_parse(v) end
  if last ~= expected or not fence_holds(ARGV[i + 7], ARGV[i + 8]) then return 0 end
  cursor_write(job, scope, slot, ARGV[i + 4], count + tonumber(ARGV[i + 5]), ARGV[i + 6])
  local first = i + 10
  for k = first, first + 13 * (tonumber(ARGV[i + 9]) - 1), 13 do insert_item(k) end
  return 1
end

if op == 'advance' then
  local applied, i = {}, 6
  while i <= #ARGV do
    applied[#applied + 1] = advance(i)
    i = i + 10 + 13 * tonumber(ARGV[i + 9])
  end
  return applied
elseif op == 'due' then
  local limit = tonumber(ARGV[7])
  local ranges = {}
  for i = 8, #ARGV, 2 do ranges[#ranges + 1] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1])} end
  local function wanted(slot)
    if #ranges == 0 then return true end
    for _, r in ipairs(ranges) do
      if slot >= r[1] and slot < r[2] then return true end
    end
    return false
  end
  local chunk = math.min(math.max(2 * limit, 100), 1000)
  local skipped = 0
  -- Visit the wanted members scored in [min, max], in order, until visit returns true
  -- (returns true) or they run out (nil); past MAX_SKIPPED skipped members, returns the
  -- score where it stopped.
  local function scan(min, max, visit)
    local offset = 0
    while true do
      local page = redis.call('ZRANGEBYSCORE', PLAN, min, max, 'WITHSCORES', 'LIMIT', offset,
        chunk)
      for i = 1, #page, 2 do
        local job, scope, slot = plan_stream(page[i])
        if wanted(slot) then
          if visit(job, scope, tonumber(page[i + 1])) then return true end
        else
          skipped = skipped + 1
          if skipped > MAX_SKIPPED then return tonumber(page[i + 1]) end
        end
      end
      if #page < 2 * chunk then return nil end
      offset = offset + chunk
    end
  end
  local out = {false}
  local stopped = scan('-inf', ARGV[6], function(job, scope)
    local fields = redis.call('HMGET', B .. ':j:' .. job, unpack(JOB))
    if not fields[1] then fields = false end
    local v = redis.call('HGET', B .. ':cur:' .. job, scope)
    if v then out[#out + 1] = {job, scope, v, fields} end
    return #out > limit
  end)
  if type(stopped) == 'number' then
    out[1] = us(stopped)
  else
    local found = scan('(' .. ARGV[6], '+inf', function(_, _, score)
      out[1] = us(score)
      return true
    end)
    if type(found) == 'number' then out[1] = us(found) end
  end
  return out
elseif op == 'ensure' then
  local at, revive = ARGV[6], ARGV[7] == '1'
  if at == '' then at = NOW_US end
  local changed = 0
  for i = 8, #ARGV, 3 do
    local job, scope, slot = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local v = redis.call('HGET', B .. ':cur:' .. job, scope)
    if not v then
      cursor_write(job, scope, slot, '', 0, at)
      changed = changed + 1
    else
      -- an old cursor (no slot) enters the index; revive pulls a later entry back to at
      local last, count, nxt, had = cursor_parse(v)
      local later = nxt == '' or tonumber(nxt) > tonumber(at)
      if had == nil or (revive and later) then
        cursor_write(job, scope, slot, last, count, at)
        changed = changed + 1
      end
    end
  end
  return changed
elseif op == 'upgrade' then
  local upgraded, i = 0, 6
  while i <= #ARGV do
    local job, n = ARGV[i], tonumber(ARGV[i + 1])
    for k = i + 2, i + 2 * n, 2 do
      local v = redis.call('HGET', B .. ':cur:' .. job, ARGV[k])
      if v then
        local last, count, _, slot = cursor_parse(v)
        if slot == nil then
          cursor_write(job, ARGV[k], ARGV[k + 1], last, count, last)
          upgraded = upgraded + 1
        end
      end
    end
    i = i + 2 + 2 * n
  end
  return upgraded
end
return redis.error_reply('unknown plan operation ' .. tostring(op))
