-- reserve-job: ARGV[3] id, ARGV[4] owner -> nil or {id, body, deadline, 0, now, waited}
-- (a delayed or buried job never waited as ready: 0)
local T, G, tube = tube_keys(1), ns_keys(8), ARGV[1]
local id = ARGV[3]
local j = get_job(T, id)
if not j or j[STATE] == 'reserved' then return nil end
local now = now_us()
local w = 0
if j[STATE] == 'ready' then w = waited(j, now) end
detach(T, id, j)
local deadline = now + j[TTR] * 1000000
j[RESERVES] = j[RESERVES] + 1
attach(T, G, id, j, 'reserved', deadline, ARGV[4])
put_job(T, id, j)
due_by(G, tube, deadline + 1)
return { id, redis.call('HGET', T.bodies, id), deadline, 0, now, w }
