-- Insert occurrences, ignoring existing dedupe keys. ARGV[5]: 'one', 'many' or 'now'.
-- 'one' and 'many': items (13 values each, see insert_item in lib.lua) follow from ARGV[6].
-- 'now' (enqueue in one call): ARGV[6] and ARGV[7] the delay's whole seconds and the
-- microseconds left, ARGV[8] the seconds from 0001-01-01 to the epoch (codec's plan sort
-- key offset), then one item from ARGV[9] whose plan time, sort key and due time are left
-- empty: they become this script's NOW plus the delay. Returns 'one': {created 0/1, the row as JSON (rows_json of one row: one reply to
-- parse instead of 24)}; 'now': {1, created_at, due_at} for a new row (the rest of it is
-- what the caller sent), {0, the existing row as JSON} for a known key; 'many': the number
-- created. (Plans insert through plan.lua.)
local mode = ARGV[5]
local first = 6
if mode == 'now' then
  first = 9
  -- Whole seconds and microseconds apart: a double holds integers exactly up to 2^53, and
  -- the sort key (due + offset, 18 digits) and a long delay's due time go past it.
  local seconds = math.floor(NOW / 1000000)
  local micros = NOW - seconds * 1000000 + tonumber(ARGV[7])
  seconds = seconds + tonumber(ARGV[6])
  if micros >= 1000000 then
    seconds, micros = seconds + 1, micros - 1000000
  end
  local due = string.format('%.0f%06d', seconds, micros)
  ARGV[first + 5] = due
  ARGV[first + 6] = string.format('%012.0f%06d', seconds + tonumber(ARGV[8]), micros)
  ARGV[first + 7] = due
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
