-- Apply what is due in one tube: delayed jobs become ready, lapsed reservations
-- (deadline strictly before now) return to ready, an ended pause is cleared.
-- -> 1 when a job may now be reserved (waiters are woken), else 0
local T, G, tube, origin = tube_keys(1), ns_keys(8), ARGV[1], ARGV[2]
local now = now_us()
local woke = 0
-- A job has been ready since its due time or deadline, not since this tick noticed.
for _, m in ipairs(redis.call('ZRANGEBYSCORE', T.delayed, '-inf', now)) do
  local id = id_of(m)
  local j = get_job(T, id)
  to_ready(T, G, id, j, nil, j[DUE])
  woke = 1
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', T.reserved, '-inf', '(' .. now)) do
  local id = id_of(m)
  local j = get_job(T, id)
  to_ready(T, G, id, j, TIMEOUTS, j[DUE])
  redis.call('HINCRBY', G.stats, 'job_timeouts', '1')
  woke = 1
end
local pu = tonumber(redis.call('HGET', T.meta, 'pause_until') or '0')
if pu > 0 and pu <= now then
  redis.call('HSET', T.meta, 'pause', 0, 'pause_until', 0)
  woke = 1
end
reschedule(T, G, tube)
if woke == 1 then wake(origin, tube) end
return woke
