-- Shared head of every soloist script (see soloist/stores/redis/__init__.py for the data
-- model). ARGV[1]: the key base "{prefix}"; ARGV[2]: the instant in microseconds since
-- the epoch, or "" for the server's TIME; ARGV[3]: history count limit (0: none);
-- ARGV[4]: history age limit in microseconds (0: none). Script arguments start at ARGV[5].
-- Times are integers of microseconds (exact in Lua's doubles until the year 2255).
local B = ARGV[1]
local NOW
if ARGV[2] ~= '' then
  NOW = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Work due no later than this after it is written wakes idle instances.
local HORIZON = 60000000
-- Fields of an occurrence hash, in the order soloist.stores.redis.codec reads them.
-- 'crashes' and 'maxc' (max_crashes) are missing from rows written before they existed:
-- read as 0 and 3 (see codec.occurrence and reap.lua). 'cancel' is '1' once the row's
-- cancellation was requested (runner.lua's cancel), missing otherwise.
local FIELDS = {'id', 'key', 'job', 'task', 'scope', 'plan', 'due', 'kind', 'state', 'att',
  'max', 'ovl', 'payload', 'inst', 'lease', 'tok', 'created', 'started', 'finished', 'ecode',
  'emsg', 'result', 'crashes', 'maxc', 'cancel'}

local function us(n)
  return string.format('%.0f', n)
end
local NOW_US = us(NOW)

-- Whether the store lost its data since the caller set it up: the identity written by
-- migrate (`expected`, '' when the caller knows none) is missing or different. Returns
-- nil when it is the same, else what is there now ('' for a missing key).
local function identity_changed(expected)
  if expected == nil or expected == '' then return nil end
  local found = redis.call('GET', B .. ':identity')
  if found == expected then return nil end
  return found or ''
end

local function okey(id)
  return B .. ':o:' .. id
end

-- Fields of a job hash, in the order soloist.stores.redis.codec.job reads them.
local JOB = {'task', 'schedule', 'payload', 'metadata', 'dynamic', 'paused', 'created'}

-- The planning index: a sorted set of one member per (job, scope) cursor whose next plan
-- time is set, scored by that time. A member is job \0 scope \0, then the stream's slot
-- (4 digits) and the byte length of job (10 digits): members of equal score order by job,
-- then scope (as bytes), and a member names its stream and slot without a lookup.
local PLAN = B .. ':plan'
local function plan_member(job, scope, slot)
  return job .. '\0' .. scope .. '\0' .. string.format('%04d%010d', tonumber(slot), #job)
end
-- job, scope and slot (a number) of a planning index member.
local function plan_stream(member)
  local n = #member
  local jlen = tonumber(string.sub(member, n - 9))
  return string.sub(member, 1, jlen), string.sub(member, jlen + 2, n - 15),
    tonumber(string.sub(member, n - 13, n - 10))
end
-- A cursor is a field (the scope) of the hash ':cur:' .. job, its value
-- 'last|count|next|slot': last and next plan times ('' for none), the planned count, the
-- slot. Cursors written before the planning index are 'last|count' until migrate upgrades
-- them. Returns last, count (a number), next and slot (nil for an old cursor).
local function cursor_parse(v)
  local a = string.find(v, '|', 1, true)
  local b = string.find(v, '|', a + 1, true)
  if not b then return string.sub(v, 1, a - 1), tonumber(string.sub(v, a + 1)), '', nil end
  local c = string.find(v, '|', b + 1, true)
  return string.sub(v, 1, a - 1), tonumber(string.sub(v, a + 1, b - 1)),
    string.sub(v, b + 1, c - 1), string.sub(v, c + 1)
end
-- The lease of planning partition n: a hash {holder, epoch, expires} (see partitions.lua).
local function part_key(n)
  return B .. ':part:' .. n
end
-- Write the cursor of (job, scope) and its planning index entry (none when nxt is '').
local function cursor_write(job, scope, slot, last, count, nxt)
  redis.call('HSET', B .. ':cur:' .. job, scope,
    last .. '|' .. us(count) .. '|' .. nxt .. '|' .. slot)
  if nxt == '' then
    redis.call('ZREM', PLAN, plan_member(job, scope, slot))
  else
    redis.call('ZADD', PLAN, nxt, plan_member(job, scope, slot))
  end
end

local function row(id)
  return redis.call('HMGET', okey(id), unpack(FIELDS))
end

-- Many rows as one JSON text (every field a string or false): one reply for the client to
-- parse at C speed instead of 22 replies per row.
local function rows_json(rows)
  if #rows == 0 then return '[]' end
  return cjson.encode(rows)
end

-- Optional strings travel as '' (None) or '=' .. text.
local function opt(v)
  if v == '' then return nil end
  return string.sub(v, 2)
end

local function setopt(k, field, v)
  if v == nil then redis.call('HDEL', k, field) else redis.call('HSET', k, field, v) end
end

-- The finished states, and a job's finished occurrences: the sorted set ':fin:' .. job
-- (score 0, members sort keys, so by plan time then insertion, as ':job:'), whose newest
-- member is the job's last outcome (pages.lua) whatever waits after it.
local FINISHED = {succeeded = true, dead = true, skipped = true}
local function fin_key(job)
  return B .. ':fin:' .. job
end

-- A state change of one occurrence: its state index, the (job, state) counters and the
-- job's finished index (to nil: the occurrence is deleted).
local function move(ord, job, from, to)
  if from then
    redis.call('ZREM', B .. ':st:' .. from, ord)
    local f = job .. '\0' .. from
    if redis.call('HINCRBY', B .. ':counts', f, -1) <= 0 then redis.call('HDEL', B .. ':counts', f) end
    if FINISHED[from] and not FINISHED[to] then redis.call('ZREM', fin_key(job), ord) end
  end
  if to then
    redis.call('ZADD', B .. ':st:' .. to, 0, ord)
    redis.call('HINCRBY', B .. ':counts', job .. '\0' .. to, 1)
    if FINISHED[to] then redis.call('ZADD', fin_key(job), 0, ord) end
  end
end

local woken = false
local function wake(due)
  if not woken and due <= NOW + HORIZON then
    redis.call('PUBLISH', B .. ':wake', 'work')
    woken = true
  end
end

-- How many occurrences of an overlap group run: the overlap rule's question. The group is
-- (job, scope, task), field ``busy_field``; a claim records the field in the row's 'busy'
-- and the end of the attempt decrements that exact field. Rows claimed before the task was
-- part of the group have no 'busy': theirs is the old (job, scope) field, ``old_busy_field``
-- (which a claim also checks while such rows run, so an upgrade starts no overlap).
local function busy_field(job, scope, task)
  return job .. '\0' .. scope .. '\0' .. task
end
local function old_busy_field(job, scope)
  return job .. '\0' .. scope
end
-- When the running rows of a group started: the sorted set ':since:' .. field (member: id,
-- score: started), written at claim next to the counter, emptied with it. The skip rule
-- asks for the earliest start (see Store.occurrence_claim).
local function since_key(f)
  return B .. ':since:' .. f
end
local function busy(f, n)
  if redis.call('HINCRBY', B .. ':busy', f, n) <= 0 then
    redis.call('HDEL', B .. ':busy', f)
    redis.call('DEL', since_key(f))
  end
end
-- The earliest started_at (microseconds) of the running rows of a group, or nil if none
-- runs. When the start times do not account for every running row (rows claimed before
-- they were kept, or the old (job, scope) counter), the answer is -inf: as early as can
-- be, so a skip candidate is skipped, the rule of those rows' time.
local function running_since(job, scope, task)
  local f = busy_field(job, scope, task)
  if redis.call('HEXISTS', B .. ':busy', old_busy_field(job, scope)) == 1 then
    return -math.huge
  end
  local n = tonumber(redis.call('HGET', B .. ':busy', f) or '0')
  if n <= 0 then return nil end
  if redis.call('ZCARD', since_key(f)) ~= n then return -math.huge end
  return tonumber(redis.call('ZRANGE', since_key(f), 0, 0, 'WITHSCORES')[2])
end

-- The fields a runner's write reads: the fence, and what the attempt record needs.
local HELD = {'state', 'inst', 'tok', 'job', 'scope', 'task', 'ord', 'att', 'started', 'max', 'due',
  'crashes', 'maxc', 'busy', 'cancel'}
local function held(id, tok, instance)
  local h = redis.call('HMGET', okey(id), unpack(HELD))
  if h[1] ~= 'running' or h[2] ~= instance or h[3] ~= tok then return nil end
  return h
end

-- Append the audit record of the attempt ``h`` (a HELD read of a running row) ends with.
local function log(id, h, outcome, ecode, emsg)
  local rec = {att = h[8], tok = h[3], inst = h[2] or nil, started = h[9] or nil,
    finished = NOW_US, outcome = outcome, ecode = ecode, emsg = emsg}
  redis.call('RPUSH', B .. ':a:' .. id, cjson.encode(rec))
end

-- The attempt is over: off the lease index, one runner less for the overlap rule.
local function stopped(id, h)
  redis.call('ZREM', B .. ':running', id)
  if h[14] then redis.call('ZREM', since_key(h[14]), id) end
  busy(h[14] or old_busy_field(h[4], h[5]), -1)
  redis.call('HDEL', okey(id), 'lease', 'busy')
end

-- The history: finished occurrences scored by finish time; members are sort keys, so that
-- of several finished at the same instant the earliest planned go first.
local function finished(ord)
  redis.call('ZADD', B .. ':done', NOW, ord)
end

-- Forget a finished occurrence entirely (history retention).
local function drop(ord)
  local id = string.sub(ord, 31)
  local k = okey(id)
  local h = redis.call('HMGET', k, 'key', 'job', 'state', 'ord')
  if h[4] then
    redis.call('ZREM', B .. ':all', h[4])
    redis.call('ZREM', B .. ':job:' .. h[2], h[4])
    move(h[4], h[2], h[3], nil)
    if redis.call('HGET', B .. ':dedupe', h[1]) == id then redis.call('HDEL', B .. ':dedupe', h[1]) end
  end
  redis.call('DEL', k, B .. ':a:' .. id)
  redis.call('ZREM', B .. ':done', ord)
end

-- Trim the history to its bounds, at most ``budget`` occurrences per call (the rest on
-- later calls: every finishing write trims more than it adds).
local function trim(budget)
  local done = B .. ':done'
  local age = tonumber(ARGV[4])
  if age > 0 then
    local old = redis.call('ZRANGEBYSCORE', done, '-inf', us(NOW - age), 'LIMIT', 0, budget)
    for _, ord in ipairs(old) do drop(ord) end
    budget = budget - #old
  end
  local cap = tonumber(ARGV[3])
  if cap > 0 and budget > 0 then
    local excess = math.min(redis.call('ZCARD', done) - cap, budget)
    if excess > 0 then
      for _, ord in ipairs(redis.call('ZRANGE', done, 0, excess - 1)) do drop(ord) end
    end
  end
end

-- Insert the occurrence of the 13 values from ARGV[i] (id, dedupe key, job, task, scope,
-- plan time, plan sort key, due time, kind, max attempts, overlap, payload, max crashes)
-- unless its dedupe key exists: returns the existing id, or nil when it was inserted (with
-- every index and counter, and a wake-up if it is due soon).
local function insert_item(i)
  local id, key = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', B .. ':dedupe', key)
  if old then return old end
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
  return nil
end
