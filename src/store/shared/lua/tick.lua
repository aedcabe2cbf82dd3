-- Apply what is due in one tube: delayed jobs become ready, lapsed reservations
-- (deadline strictly before now) return to ready, an ended pause is cleared.
-- ARGV[3] the most jobs to move in this call, ARGV[4] the tube's policy ('' none: see
-- `rule_of`), whose dead letter rule may bury a lapsed reservation instead. ARGV[5]
-- the retention argument (see RET: a lapse is its holder's timeout).
-- A member whose job meta is missing (what eviction or damage leaves) cannot move: it is
-- taken out of its set, with what is left of the job, and counted as damaged, so the
-- tube's other jobs keep their timing.
-- -> {woke, more, damaged}: woke 1 when a job may now be reserved (waiters are woken),
-- more 1 when the bound was reached (call again: more may be due), damaged the number
-- of such members dropped
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local budget = tonumber(ARGV[3])
local rule = rule_of(ARGV[4])
local now = now_us()
RET = ret_of(ARGV[5], now)
local woke, damaged = 0, 0
-- A job has been ready since its due time or deadline, not since this tick noticed.
for _, m in ipairs(redis.call('ZRANGEBYSCORE', T.delayed, '-inf', now, 'LIMIT', 0, budget)) do
  local id = id_of(m)
  local j = id and get_job(tube, id)
  if j then
    to_ready(T, G, id, j, nil, j[DUE])
    woke = 1
  else
    drop_damaged(tube, T.delayed, m, id)
    damaged = damaged + 1
  end
  budget = budget - 1
end
if budget > 0 then
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', T.reserved, '-inf', '(' .. now, 'LIMIT', 0, budget)) do
    local id = id_of(m)
    local j = id and get_job(tube, id)
    if j then
      if RET then note(id, 't', conn_of(j[OWNER])) end
      if to_ready(T, G, id, j, TIMEOUTS, j[DUE], rule) then woke = 1 end
      redis.call('HINCRBY', G.stats, 'job_timeouts', '1')
    else
      drop_damaged(tube, T.reserved, m, id)
      damaged = damaged + 1
    end
    budget = budget - 1
  end
end
local pu = tonumber(redis.call('HGET', T.meta, 'pause_until') or '0')
if pu > 0 and pu <= now then
  redis.call('HSET', T.meta, 'pause', 0, 'pause_until', 0)
  woke = 1
end
reschedule(T, G, tube)
if woke == 1 then wake(origin, tube) end
local more = 0
if budget == 0 then more = 1 end
return { woke, more, damaged }
