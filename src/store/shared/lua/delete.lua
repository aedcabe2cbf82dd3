-- delete: ARGV[3] id, ARGV[4] owner ('' when the caller holds no reservation of it),
-- ARGV[5] the most dedupe windows open at once, ARGV[6] the retention argument (see
-- RET: the job's record is retained) -> 1 deleted, 0 not found (or held by another)
-- Composed without the generation check first (CHECK_FIRST): a job the caller holds is
-- proof enough (`held_by`), and the check is made for any other answer.
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(tube, id)
local held = held_by(j, ARGV[4])
if not held and not same_generation() then return namespace_lost() end
if not j or (j[STATE] == 'reserved' and not held) then return 0 end
RET = ret_of(ARGV[6])
delete_job(T, G, tube, id, j, true, tonumber(ARGV[5]))
redis.call('HINCRBY', T.meta, 'cmd_delete', '1')
maybe_gc(T, G, tube)
return 1
