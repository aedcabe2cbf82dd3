-- reserve-job: ARGV[3] id, ARGV[4] owner, ARGV[5] the retention argument (see RET) ->
-- nil or {id, body, deadline, 0, now, waited} (a delayed or buried job never waited as
-- ready: 0)
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j, body = job_for_reply(tube, id)
if not j or j[STATE] == 'reserved' then return nil end
if not body then
  -- Lost in Redis (evicted?): never served empty (see `drop_damaged`).
  local set = T[j[STATE]]
  if set then drop_damaged(tube, set, id20(id), id) end
  return redis.error_reply('DAMAGED job ' .. id .. ' in tube ' .. tube
    .. ' lost its body in Redis (evicted?): dropped, not served')
end
local now = now_us()
local w = 0
if j[STATE] == 'ready' then w = waited(j, now) end
detach(T, id, j)
local deadline = now + ttr_ms(j) * 1000
j[RESERVES] = j[RESERVES] + 1
attach(T, G, id, j, 'reserved', deadline, ARGV[4])
put_job(id, j)
due_by(G, tube, deadline + 1)
RET = ret_of(ARGV[5], now)
if RET then note(id, 'r', RET.conn) end
return { id, body, deadline, 0, now, w }
