-- Insert occurrences, ignoring existing dedupe keys. ARGV[5]: 'one', 'many' or 'plan'.
-- 'plan': ARGV[6..10] = job, scope, expected last plan time ('' = no cursor yet), new
-- last plan time, added count: the compare-and-set of the cursor, then the items (only if
-- it applied). Items (13 values each) follow: id, dedupe key, job, task, scope, plan time,
-- plan sort key, due time, kind, max attempts, overlap, payload, max crashes.
-- Returns 'one': {created 0/1, row}; 'many': the number created; 'plan': 1 or 0.
local mode = ARGV[5]
local first = 6
if mode == 'plan' then
  local ck = B .. ':cur:' .. ARGV[6]
  local cur = redis.call('HGET', ck, ARGV[7])
  local count = 0
  if cur then
    local sep = string.find(cur, '|', 1, true)
    if ARGV[8] == '' or string.sub(cur, 1, sep - 1) ~= ARGV[8] then return 0 end
    count = tonumber(string.sub(cur, sep + 1))
  elseif ARGV[8] ~= '' then
    return 0
  end
  redis.call('HSET', ck, ARGV[7], ARGV[9] .. '|' .. us(count + tonumber(ARGV[10])))
  first = 11
end
local created = 0
local existing = nil
for i = first, #ARGV, 13 do
  local id, key = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', B .. ':dedupe', key)
  if old then
    existing = old
  else
    local job, task, due = ARGV[i + 2], ARGV[i + 3], ARGV[i + 7]
    local seq = redis.call('INCR', B .. ':seq')
    local ord = ARGV[i + 6] .. string.format('%012d', seq) .. id
    redis.call('HSET', okey(id), 'id', id, 'key', key, 'job', job, 'task', task,
      'scope', ARGV[i + 4], 'plan', ARGV[i + 5], 'due', due, 'kind', ARGV[i + 8],
      'state', 'scheduled', 'att', 0, 'max', ARGV[i + 9], 'ovl', ARGV[i + 10],
      'payload', ARGV[i + 11], 'crashes', 0, 'maxc', ARGV[i + 12], 'tok', 0,
      'created', NOW_US, 'ord', ord)
    redis.call('HSET', B .. ':dedupe', key, id)
    redis.call('ZADD', B .. ':due:' .. task, due, ord)
    redis.call('SADD', B .. ':tasks', task)
    redis.call('ZADD', B .. ':all', 0, ord)
    redis.call('ZADD', B .. ':job:' .. job, 0, ord)
    move(ord, job, nil, 'scheduled')
    wake(tonumber(due))
    created = created + 1
  end
end
if mode == 'one' then
  if created == 1 then return {1, row(ARGV[first])} end
  return {0, row(existing)}
end
if mode == 'plan' then return 1 end
return created
