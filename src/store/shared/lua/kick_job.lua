-- kick-job: ARGV[1] id, ARGV[2] the wake-up origin (see `wake`), ARGV[3] the retention
-- argument (see RET); the job found by its id alone (`find_job`: its tube's keys named
-- here, one round trip) -> its tube when kicked; nil when not found, or not buried or
-- delayed
local id = ARGV[1]
local tube, j = find_job(id)
if not tube or (j[STATE] ~= 'buried' and j[STATE] ~= 'delayed') then return nil end
local T = tube_group_of(G.tag, tube)
RET = ret_of(ARGV[3])
if RET then note(id, 'k', '0') end
to_ready(T, G, id, j, KICKS)
wake(ARGV[2], tube)
return tube
