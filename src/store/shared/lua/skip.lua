-- skip: a schedule's cursor advanced without a job (missed ticks, a resume, a changed
-- spec; store/schedule.rs). Own key 1: the cursor hash. ARGV[1] the schedule's name,
-- ARGV[2] the tick (ms), ARGV[3] ticks skipped -> {'skipped'}, {'stale', last tick}
-- or {'bad', cursor text}. The same check-and-set as fire.lua, so a skip and a fire of
-- the same tick never both happen.
local C, name, tick = own_key(1), ARGV[1], ARGV[2]
local c, raw = cursor_get(C, name)
if not c then return { 'bad', raw } end
if not dec_gt(tick, c[1]) then return { 'stale', c[1] } end
c[1], c[5] = tick, dec_add(c[5], tonumber(ARGV[3]))
redis.call('HSET', C, name, table.concat(c, ' '))
return { 'skipped' }
