-- Claim up to ARGV[6] due occurrences of the tasks ARGV[9..] for instance ARGV[5], with a
-- lease of ARGV[7] microseconds. The tasks' due sets (score: due time; member: plan sort
-- key .. sequence .. id, so equal due times order by plan time, then insertion) are merged
-- in order. Overlap: a skip/queue candidate whose (job, scope, task) runs (a claim of this
-- batch included: it runs from now) is not claimed; a skip one becomes skipped only if a
-- running sibling started before it was due, else it waits like queue. ARGV[8] '1'
-- (allow_only): only overlap 'allow' rows are candidates; the others are passed over,
-- left as they are. Returns the claimed rows.
local instance, limit, ttl = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local allow_only = ARGV[8] == '1'
local lease = NOW + ttl
-- Blocked candidates (overlap queue) looked at beyond the batch, at most: bounds the work
-- of one call when many queued occurrences wait behind running ones. Rows passed over by
-- an allow_only claim count too.
local MAX_BLOCKED = 1000
local PAGE = math.max(2 * limit, 50)
local sources = {}
for i = 9, #ARGV do
  sources[#sources + 1] = {task = ARGV[i], key = B .. ':due:' .. ARGV[i], items = {}, pos = 1,
    offset = 0, last = false}
end
local function fill(s)
  s.items = redis.call('ZRANGEBYSCORE', s.key, '-inf', NOW_US, 'WITHSCORES', 'LIMIT', s.offset, PAGE)
  s.pos = 1
  s.offset = s.offset + #s.items / 2
  s.last = #s.items / 2 < PAGE
end
-- The source holding the next candidate in (due, member) order, or nil.
local function next_source()
  local best, bscore, bmember = nil, nil, nil
  for _, s in ipairs(sources) do
    if s.pos > #s.items and not s.last then fill(s) end
    if s.pos <= #s.items then
      local member, score = s.items[s.pos], tonumber(s.items[s.pos + 1])
      if best == nil or score < bscore or (score == bscore and member < bmember) then
        best, bscore, bmember = s, score, member
      end
    end
  end
  return best
end
local claimed, blocked, passed = {}, 0, 0
while #claimed < limit and blocked + passed <= MAX_BLOCKED do
  local s = next_source()
  if s == nil then break end
  local ord = s.items[s.pos]
  s.pos = s.pos + 2
  local id = string.sub(ord, 31)
  local k = okey(id)
  local h = redis.call('HMGET', k, 'job', 'scope', 'ovl', 'state', 'att', 'tok', 'task', 'due')
  local group = busy_field(h[1], h[2], h[7])
  local since = nil
  if h[3] ~= 'allow' and not allow_only then since = running_since(h[1], h[2], h[7]) end
  if h[3] ~= 'allow' and allow_only then
    passed = passed + 1  -- not a candidate of this claim: left as it is
  elseif since ~= nil then
    blocked = blocked + 1
    if h[3] == 'skip' and since < tonumber(h[8]) then
      redis.call('ZREM', s.key, ord)
      s.offset = s.offset - 1
      redis.call('HSET', k, 'state', 'skipped', 'finished', NOW_US, 'ecode', 'overlap',
        'emsg', 'skipped: a previous occurrence of this job and scope was running')
      move(ord, h[1], h[4], 'skipped')
      finished(ord)
    end
  else
    redis.call('ZREM', s.key, ord)
    s.offset = s.offset - 1
    redis.call('HSET', k, 'state', 'running', 'att', tonumber(h[5]) + 1,
      'tok', tonumber(h[6]) + 1, 'inst', instance, 'started', NOW_US, 'lease', us(lease),
      'busy', group)
    redis.call('HDEL', k, 'finished', 'ecode', 'emsg', 'result')
    redis.call('ZADD', B .. ':running', lease, id)
    redis.call('ZADD', since_key(group), NOW_US, id)
    busy(group, 1)
    move(ord, h[1], h[4], 'running')
    claimed[#claimed + 1] = row(id)
  end
end
if blocked > 0 then trim(100) end
return rows_json(claimed)
