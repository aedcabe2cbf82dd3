-- delete: ARGV[3] id, ARGV[4] owner, ARGV[5] the most dedupe windows open at once,
-- ARGV[6] the retention argument (see RET: the job's record is retained)
-- -> 1 deleted, 0 not found (or held by another)
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(T, id)
if not j then return 0 end
if j[STATE] == 'reserved' and j[OWNER] ~= ARGV[4] then return 0 end
RET = ret_of(ARGV[6])
delete_job(T, G, tube, id, j, true, tonumber(ARGV[5]))
redis.call('HINCRBY', T.meta, 'cmd_delete', '1')
maybe_gc(T, G, tube)
return 1
