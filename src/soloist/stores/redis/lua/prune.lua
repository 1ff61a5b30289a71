-- Store.history_prune: the finished occurrences (the history, ':done', by finish time)
-- that finished before ARGV[5] (microseconds; '' for no age bound) or are beyond the
-- newest ARGV[6] ('' for no count bound), oldest first, at most ARGV[7] of them, are
-- forgotten with their attempts, index entries and dedupe keys (drop). Both bounds cut
-- the head of ':done', so the rows to go are its first n. With ARGV[8] = '1' nothing is
-- deleted (a dry run). Returns how many were (or would be) deleted.
local done = B .. ':done'
local budget = tonumber(ARGV[7])
local n = 0
if ARGV[5] ~= '' then
  n = redis.call('ZCOUNT', done, '-inf', '(' .. ARGV[5])
end
if ARGV[6] ~= '' then
  n = math.max(n, redis.call('ZCARD', done) - tonumber(ARGV[6]))
end
n = math.min(n, budget)
if n <= 0 then return 0 end
if ARGV[8] == '1' then return n end
for _, ord in ipairs(redis.call('ZRANGE', done, 0, n - 1)) do drop(ord) end
return n
