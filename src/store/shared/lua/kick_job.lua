-- kick-job: ARGV[3] id, ARGV[4] the retention argument (see RET) -> 1 kicked, 0 not
-- found / not buried or delayed
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local id = ARGV[3]
local j = get_job(tube, id)
if not j or (j[STATE] ~= 'buried' and j[STATE] ~= 'delayed') then return 0 end
RET = ret_of(ARGV[4])
if RET then note(id, 'k', '0') end
to_ready(T, G, id, j, KICKS)
wake(origin, tube)
return 1
