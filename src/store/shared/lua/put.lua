-- put: ARGV[3] pri, ARGV[4] delay (ms), ARGV[5] ttr (ms), ARGV[6] body -> the id.
-- ARGV[7], when given: an id the caller took, under which it wrote the body already (a
-- large body stays out of Lua, see large.rs); ARGV[6] is then empty.
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local pri, delay, ttr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_us()
local id = ARGV[7]
if id then
  if redis.call('HEXISTS', T.bodies, id) == 0 then
    return redis.error_reply('BODY_MISSING the body written ahead of this put is gone')
  end
else
  local n = redis.call('INCR', G.ids)
  -- A Lua number is a double: past 2^53 only the counter's own text is exact.
  id = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', G.ids)
  redis.call('HSET', T.bodies, id, ARGV[6])
end
-- A tube whose meta already counts a put is in the tube list: both go together when it
-- is destroyed, so only a tube's first put (since its meta was made) checks the list.
if redis.call('HINCRBY', T.meta, 'total_jobs', '1') == 1 then ensure_tube(G, tube) end
local j = { pri, 0, 0, now, '', 0, '', 0, 0, 0, 0, 0, 0, now }
set_times(j, delay, ttr)
redis.call('HSET', G.index, id, tube)
redis.call('HINCRBY', G.stats, 'total_jobs', '1')
if delay > 0 then
  local due = now + delay * 1000
  attach(T, G, id, j, 'delayed', due)
  put_job(T, id, j)
  due_by(G, tube, due)
else
  attach(T, G, id, j, 'ready')
  put_job(T, id, j)
  wake(origin, tube)
end
return id
