-- Jobs: a hash per job {task, schedule, payload, metadata, dynamic, paused, created} and
-- the sorted set of names (score 0: by name). ARGV[5]: the operation.
--   upsert: records of 8 values from ARGV[6]: name, task, schedule, payload, metadata,
--           dynamic, paused, created ('' = now); an existing job keeps dynamic, paused and
--           created.
--   add:    one such record, then ARGV[14] the slot of its stream (name, ''); 0 if the
--           name is taken, else 1: the job, and its stream's cursor never planned, due in
--           the planning index at created (and a wake-up: a new schedule).
--   list:   every job as {name, HMGET of the fields}, by name.
--   delete: ARGV[6] name: drops the job, its cursors and their planning index entries; 1
--           if the job existed.
--   pause:  ARGV[6] name, ARGV[7] '1'/'0'; 0 if unknown (a resume wakes the planners).
local op = ARGV[5]
local function jkey(name) return B .. ':j:' .. name end
local function write(i, keep)
  local k = jkey(ARGV[i])
  local created = ARGV[i + 7]
  if created == '' then created = NOW_US end
  redis.call('HSET', k, 'task', ARGV[i + 1], 'schedule', ARGV[i + 2], 'payload', ARGV[i + 3],
    'metadata', ARGV[i + 4])
  redis.call('HSETNX', k, 'dynamic', ARGV[i + 5])
  redis.call('HSETNX', k, 'paused', ARGV[i + 6])
  redis.call('HSETNX', k, 'created', created)
  redis.call('ZADD', B .. ':jobs', 0, ARGV[i])
end
if op == 'upsert' then
  for i = 6, #ARGV, 8 do write(i) end
  return 1
elseif op == 'add' then
  if redis.call('EXISTS', jkey(ARGV[6])) == 1 then return 0 end
  write(6)
  local created = ARGV[13]
  if created == '' then created = NOW_US end
  cursor_write(ARGV[6], '', ARGV[14], '', 0, created)
  redis.call('PUBLISH', B .. ':wake', 'job')
  return 1
elseif op == 'list' then
  local out = {}
  for _, name in ipairs(redis.call('ZRANGE', B .. ':jobs', 0, -1)) do
    out[#out + 1] = {name, redis.call('HMGET', jkey(name), unpack(JOB))}
  end
  return out
elseif op == 'delete' then
  local ck = B .. ':cur:' .. ARGV[6]
  local cursors = redis.call('HGETALL', ck)
  for i = 1, #cursors, 2 do
    local _, _, _, slot = cursor_parse(cursors[i + 1])
    if slot then redis.call('ZREM', PLAN, plan_member(ARGV[6], cursors[i], slot)) end
  end
  redis.call('DEL', ck)
  redis.call('ZREM', B .. ':jobs', ARGV[6])
  return redis.call('DEL', jkey(ARGV[6]))
elseif op == 'pause' then
  if redis.call('EXISTS', jkey(ARGV[6])) == 0 then return 0 end
  redis.call('HSET', jkey(ARGV[6]), 'paused', ARGV[7])
  if ARGV[7] == '0' then redis.call('PUBLISH', B .. ':wake', 'job') end
  return 1
end
return redis.error_reply('unknown job operation ' .. tostring(op))
