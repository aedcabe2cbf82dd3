-- purge (one job deleted as a flush step deletes its jobs; flush.lua does its own):
-- ARGV[3] id -> 1 deleted, 0 not found. Any state,
-- any holder; its key freed at once (no window); no cmd-delete counted.
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(T, id)
if not j then return 0 end
delete_job(T, G, tube, id, j, false, 0)
maybe_gc(T, G, tube)
return 1
