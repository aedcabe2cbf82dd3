-- A closed connection's job goes back to ready at once, counters untouched.
-- ARGV[3] id, ARGV[4] owner -> 1 or 0
local T, G, tube, origin = tube_keys(1), ns_keys(8), ARGV[1], ARGV[2]
local id = ARGV[3]
local j = get_job(T, id)
if not j or j[STATE] ~= 'reserved' or j[OWNER] ~= ARGV[4] then return 0 end
to_ready(T, G, id, j)
wake(origin, tube)
return 1
