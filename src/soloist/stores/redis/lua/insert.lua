-- Insert occurrences, ignoring existing dedupe keys. ARGV[5]: 'one', 'many' or 'now'.
-- 'one' and 'many': items (13 values each, see insert_item in lib.lua) follow from ARGV[6].
-- 'now' (enqueue in one call): ARGV[6] the delay in microseconds, ARGV[7] the seconds from
-- 0001-01-01 to the epoch (codec's plan sort key offset), then one item from ARGV[8] whose
-- plan time, sort key and due time are left empty: they become this script's NOW plus the
-- delay. Returns 'one': {created 0/1, the row as JSON (rows_json of one row: one reply to
-- parse instead of 24)}; 'now': {1, created_at, due_at} for a new row (the rest of it is
-- what the caller sent), {0, the existing row as JSON} for a known key; 'many': the number
-- created. (Plans insert through plan.lua.)
local mode = ARGV[5]
local first = 6
if mode == 'now' then
  first = 8
  local due = NOW + tonumber(ARGV[6])
  -- The sort key is due + offset in 18 digits: past 2^53, more than a double holds
  -- exactly, so whole seconds and microseconds are written apart.
  local seconds = math.floor(due / 1000000)
  ARGV[first + 5] = us(due)
  ARGV[first + 6] = string.format('%012.0f%06d', seconds + tonumber(ARGV[7]),
    due - seconds * 1000000)
  ARGV[first + 7] = us(due)
end
local created = 0
local existing = nil
for i = first, #ARGV, 13 do
  local old = insert_item(i)
  if old then existing = old else created = created + 1 end
end
if mode == 'many' then return created end
if created == 0 then return {0, rows_json({row(existing)})} end
if mode == 'now' then return {1, NOW_US, ARGV[first + 7]} end
return {1, rows_json({row(ARGV[first])})}
