-- Insert occurrences, ignoring existing dedupe keys. ARGV[5]: 'one' or 'many'. Items (13
-- values each, see insert_item in lib.lua) follow from ARGV[6]. Returns 'one': {created
-- 0/1, row}; 'many': the number created. (Plans insert through plan.lua.)
local mode = ARGV[5]
local created = 0
local existing = nil
for i = 6, #ARGV, 13 do
  local old = insert_item(i)
  if old then existing = old else created = created + 1 end
end
if mode == 'one' then
  if created == 1 then return {1, row(ARGV[6])} end
  return {0, row(existing)}
end
return created
